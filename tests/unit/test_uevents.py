"""Kernel uevent messages: which ones mean a CPU went offline or online."""

from __future__ import annotations

import pytest

from deviceplugin.host.watchers import cpu_uevent


def kernel_message(action: str, devpath: str) -> bytes:
    fields = [f"{action}@{devpath}", f"ACTION={action}", f"DEVPATH={devpath}", "SUBSYSTEM=cpu", "SEQNUM=4711"]
    return "\0".join(fields).encode() + b"\0"


@pytest.mark.parametrize(("action", "cpu"), [("offline", 3), ("online", 3), ("add", 127), ("remove", 0)])
def test_cpu_hotplug_uevents_are_recognised(action, cpu):
    assert cpu_uevent(kernel_message(action, f"/devices/system/cpu/cpu{cpu}")) == (action, cpu)


@pytest.mark.parametrize("message", [
    kernel_message("change", "/devices/system/cpu/cpu3"),  # e.g. a microcode reload
    kernel_message("online", "/devices/system/memory/memory3"),
    kernel_message("add", "/devices/system/cpu/cpufreq/policy0"),
    kernel_message("add", "/devices/virtual/net/veth0"),
    b"libudev\0\xfe\xed\xca\xfe",  # udev's own re-broadcast, not the kernel's
    b"",
])
def test_other_uevents_are_ignored(message):
    assert cpu_uevent(message) is None
