"""Once every pool is registered with the kubelet, the node's ``cmk.intel.com/pools-not-ready`` taint goes.

A thread of its own, so the supervisor's loop never waits on the API server: it polls the
daemon's registration, then removes the taint (retrying, from 10 s up to every 5 min, while the API server refuses or is away),
then ends. It never sets the taint: that is the operator's, before the daemon runs on the node.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from deviceplugin.events import EventLog
from deviceplugin.model.taints import POOLS_NOT_READY

events = EventLog(__name__)


class Untaint:
    """Removes the taint of ``node`` once ``registered()`` holds, through ``remove`` (True: there was one)."""

    def __init__(self, node: str, registered: Callable[[], bool], remove: Callable[[str], bool], *,
                 poll: float = 1.0, retry: float = 10.0, retry_max: float = 300.0) -> None:
        self._node, self._registered, self._remove = node, registered, remove
        self._poll, self._retry, self._retry_max = poll, retry, retry_max
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cmk-untaint", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        retry = self._retry
        while not self._stop.is_set():
            if not self._registered():
                self._stop.wait(self._poll)
                continue
            try:
                removed = self._remove(self._node)
            except Exception as err:  # noqa: BLE001 - the API server's refusal or any surprise: say it, try again later
                events.warning("taint_unremoved", f"cannot remove taint {POOLS_NOT_READY} from node {self._node}: "
                               f"{err} (retrying in {retry:g} s)", node=self._node, taint=POOLS_NOT_READY,
                               error=str(err), retry_seconds=retry)
                self._stop.wait(retry)
                retry = min(retry * 2, self._retry_max)
                continue
            if removed:
                events.info("taint_removed", f"pools registered: removed taint {POOLS_NOT_READY} from node {self._node}",
                            node=self._node, taint=POOLS_NOT_READY)
            else:
                events.info("taint_absent", f"pools registered: node {self._node} has no taint {POOLS_NOT_READY}",
                            node=self._node, taint=POOLS_NOT_READY)
            return
