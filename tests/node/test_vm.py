"""When the node tier boots a VM a second time: only when the emulator failed (pure, no VM)."""

from __future__ import annotations

from tests.node.vm import QEMU_ABORT, boot_again

#: The console tail of the boot that made the retry necessary (clean-clone CI, shape c, 11 s).
ABORTED = ("[    9.8] virtio_net virtio1 eth0: renamed\n"
           "qemu-system-x86_64: ../../hw/pci/msix.c:218: msix_table_mmio_write: Assertion "
           "`addr + size <= dev->msix_entries_nr * PCI_MSIX_ENTRY_SIZE' failed.\n")


def test_qemus_own_assertion_is_an_emulator_abort() -> None:
    assert QEMU_ABORT.search(ABORTED)


def test_a_failure_of_the_kernel_or_the_guest_is_not() -> None:
    for tail in ("[    3.1] Kernel panic - not syncing: VFS: Unable to mount root fs\n",
                 "Traceback (most recent call last):\nAssertionError: Assertion cpus == want failed.\n",
                 "guest: FAIL kernel_reports_the_shape: qemu-system-x86_64: Assertion x failed.\n",
                 ""):
        assert not QEMU_ABORT.search(tail), tail


def test_a_boot_is_tried_again_after_an_abort_or_a_silent_console_only() -> None:
    assert boot_again(ABORTED) and boot_again("") and boot_again("\n")
    assert not boot_again("[    3.1] Kernel panic - not syncing: VFS: Unable to mount root fs\n")
