"""The daemon's event sources on real kernel interfaces: inotify on a dump copy, netlink uevents."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deviceplugin.host.watchers import (
    NETLINK_KOBJECT_UEVENT,
    UEVENT_KERNEL_GROUP,
    PluginDirWatcher,
    cpu_watcher,
)
from tests.support.started import StopAfter
from tests.support.topologies import fixture_copy, set_online


@pytest.fixture
def watched_dump(tmp_path: Path) -> Iterator[tuple[Path, Path, threading.Event]]:
    """A copy of CMK's Xeon D dump with the CPU watcher running on it: sysfs, procfs, the event it sets."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    seen = threading.Event()
    with StopAfter() as kept:
        kept.start(cpu_watcher(sysfs, seen.set))
        yield sysfs, procfs, seen


def test_flipping_cpu_online_in_a_dump_copy_is_seen(watched_dump):
    sysfs, _, seen = watched_dump
    set_online(sysfs, 5, False)
    assert seen.wait(10)


def test_reading_sysfs_files_does_not_wake_the_cpu_watcher(watched_dump):
    from deviceplugin.host.sysfs import discover

    sysfs, procfs, seen = watched_dump
    discover(sysfs, procfs)  # the daemon re-reads after every event: it must not trigger itself
    (sysfs / "devices/system/cpu/cpu5/online").write_text("1\n")
    assert seen.wait(10)  # the marker write is seen...
    seen.clear()
    discover(sysfs, procfs)
    assert not seen.wait(0.5)  # ...the reads are not


def test_plugin_dir_watcher_reports_kubelet_socket_and_deletions(tmp_path):
    events: list[str] = []
    both = threading.Event()

    def record(what: str) -> None:
        events.append(what)
        if len(events) == 2:
            both.set()

    (tmp_path / "cmk-infra.sock").write_text("")
    watcher = PluginDirWatcher(tmp_path, kubelet_socket_name="kubelet.sock",
                               on_kubelet=lambda: record("kubelet"), on_deleted=lambda n: record(f"deleted {n}"))
    watcher.start()
    try:
        (tmp_path / "cmk-infra.sock").unlink()
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(tmp_path / "kubelet.sock"))
        server.close()
        assert both.wait(10)
    finally:
        watcher.stop()
    assert events == ["deleted cmk-infra.sock", "kubelet"]


@pytest.mark.skipif(os.geteuid() != 0, reason="sending to the kernel's uevent group needs root")
def test_a_cpu_uevent_on_the_kernel_netlink_group_reaches_the_watcher():
    """On the real /sys the watcher listens to kernel uevents; a root process can inject one."""
    seen = threading.Event()
    watcher = cpu_watcher(Path("/sys"), seen.set)
    assert type(watcher).__name__ == "_UeventCpuWatcher"
    watcher.start()
    try:
        sender = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT)
        # cpu0 "online" while it is online: harmless for any other listener (no udevd acts on it).
        message = b"online@/devices/system/cpu/cpu0\0ACTION=online\0DEVPATH=/devices/system/cpu/cpu0\0SUBSYSTEM=cpu\0"
        sender.sendto(message, (0, UEVENT_KERNEL_GROUP))
        sender.close()
        assert seen.wait(10)
    finally:
        watcher.stop()


WATCH_IN_NETNS = """
import sys, threading
from pathlib import Path
from deviceplugin.host.watchers import cpu_watcher
seen = threading.Event()
watcher = cpu_watcher(Path("/sys"), seen.set)
watcher.start()
print(type(watcher).__name__, flush=True)
print("seen" if seen.wait(20) else "not seen", flush=True)
watcher.stop()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a new network namespace and a synthetic uevent need root")
def test_kernel_cpu_uevents_reach_a_pod_network_namespace():
    """Why the DaemonSet needs no hostNetwork: the kernel sends uevents to every network
    namespace owned by the initial user namespace, so a pod's own netns sees CPU hotplug.

    Writing ``online`` to cpu0's ``uevent`` file makes the kernel itself emit a synthetic
    ``online`` uevent for cpu0 (no state changes), the same message a real hotplug sends.
    """
    import subprocess
    import sys

    child = subprocess.Popen(["unshare", "--net", sys.executable, "-c", WATCH_IN_NETNS],
                             cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "_UeventCpuWatcher"
        # the uevent socket is bound before the name is printed: the message queues there
        Path("/sys/devices/system/cpu/cpu0/uevent").write_text("online\n")
        assert child.stdout.readline().strip() == "seen"
    finally:
        child.kill()
        child.wait()


def test_a_cpu_folder_added_to_a_dump_copy_is_watched_from_then_on(watched_dump):
    """Only cpu/ and the cpuN/ folders are watched (not topology/ or cache/): a CPU that appears later too."""
    sysfs, _, seen = watched_dump
    (sysfs / "devices/system/cpu/cpu5/topology/core_id").write_text("5\n")
    assert not seen.wait(0.5), "a topology file is no CPU going online or offline"
    added = sysfs / "devices/system/cpu/cpu99"
    added.mkdir()
    assert seen.wait(10)
    seen.clear()
    (added / "online").write_text("0\n")
    assert seen.wait(10)
