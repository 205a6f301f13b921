"""The node daemon: a supervisor serving a node plan it is given, and the collaborators it delegates to.

``supervisor`` starts, restarts and stops the pool servers and runs the event
loop; ``wakes`` is that loop's queue; ``held`` learns which cores containers
still hold; ``nodefiles`` writes the CDI spec and the infra record once at
start; ``settings`` holds the values passed down. Why it works this way:
``docs/design/daemon.md``.
"""

from deviceplugin.daemon.settings import DaemonSettings, socket_name
from deviceplugin.daemon.supervisor import Daemon

__all__ = ["Daemon", "DaemonSettings", "socket_name"]
