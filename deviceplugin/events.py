"""The daemon's operator-facing events: each is one log line and one call to every listener.

One seam for both outputs, so a log line and a metric can never disagree
about what happened: the daemon, its servers and its registrar call
:meth:`Events.emit`; the log formatter (:mod:`deviceplugin.observe.logs`) renders
the event name and fields as ``key=value`` or JSON; listeners (the metrics)
count and time from the same fields.

Events (``event`` field) and their fields:

- ``serving``: resource, socket, devices, healthy
- ``registered``: resource, endpoint, preferred_allocation
- ``register_failed`` (warning, once per outage): resource, kubelet_socket, code, details
- ``kubelet_restart``: servers
- ``stream_lost``: resource (the kubelet ended its stream; registering it again)
- ``plugin_dir_replaced``: directory
- ``health_changed``: pool, resource, device, cpus, healthy
- ``allocated``: pool, resource, devices, cpus, seconds. The kubelet's Allocate
  request names no pod or container; ``allocation_resolved`` adds them later.
- ``allocate_refused`` (warning): pool, resource, devices, error, seconds
- ``preferred_allocation`` (debug): pool, resource, available, must_include, size, chosen, seconds
- ``preferred_allocation_refused`` (warning): pool, resource, error, seconds
- ``allocation_resolved``: pool, resource, devices, cpus, namespace, pod, container
- ``core_withheld`` (warning): core, pool, resource, device, reason: a core the kubelet
  still holds under another ID or pool is kept out of every pool; ``core_released``: core, pool
- ``metrics_serving``: address; ``nfd_written``: path, labels; ``nfd_removed``: path;
  ``nfd_kept``: path (not the file this daemon wrote)
- ``config_error`` (error): error
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

log = logging.getLogger("deviceplugin.events")

#: listener(event name, fields); called in the emitting thread, so it must be quick.
Listener = Callable[[str, Mapping[str, object]], None]


class Events:
    """Per daemon (not global), so two daemons in one test process keep their own listeners."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, event: str, message: str, *, level: int = logging.INFO, **fields: object) -> None:
        log.log(level, message, extra={"event": event, "fields": fields})
        for listener in self._listeners:
            try:
                listener(event, fields)
            except Exception:  # a broken listener must not fail an Allocate
                log.exception("event listener failed on %s", event)
