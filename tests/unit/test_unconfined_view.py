"""describe's unconfined-containers section as text: the list, the fix, and the none line's count."""

from __future__ import annotations

from deviceplugin.model.confinement import Container, Reason, Unconfined
from deviceplugin.view.unconfined import (
    FIX,
    REASONS,
    WITHOUT_KUBELET,
    render_unconfined,
    unconfined_data,
)

ID = "ab" * 32


def text(scanned: int, found: list[Unconfined], *, kubelet_read: bool = True) -> list[str]:
    return render_unconfined(unconfined_data("/sys/fs/cgroup", 2, scanned, found, complete=True, notes=[],
                                             kubelet_read=kubelet_read))


def test_none_found_counts_the_cgroups_scanned_in_words_that_agree() -> None:
    assert text(1, []) == ["Unconfined containers: none (1 container cgroup scanned at /sys/fs/cgroup, cgroup v2)"]
    assert text(3, []) == ["Unconfined containers: none (3 container cgroups scanned at /sys/fs/cgroup, cgroup v2)"]


def test_each_unconfined_container_is_a_row_with_the_fix_and_the_kubelet_note() -> None:
    found = [Unconfined(Container(ID, f"/kubepods/pod1/{ID}", frozenset({0, 1, 2, 3})), frozenset({2, 3}))]
    lines = text(2, found, kubelet_read=False)
    assert lines[0] == "Unconfined containers (1 of 2; cpusets at /sys/fs/cgroup, cgroup v2)"
    assert lines[2].split(maxsplit=4) == [ID[:12], f"/kubepods/pod1/{ID}", "0-3", "2-3",
                                          "started before the node-wide hook"]
    assert lines[3:] == [f"  fix: {FIX}", f"note: {WITHOUT_KUBELET}"]


def test_a_container_the_hook_confined_that_reaches_exclusive_cpus_is_reported_as_widened() -> None:
    """Not "started before the hook": restarting it is not the fix, and each reason gets its own fix line."""
    other = "cd" * 32
    found = [Unconfined(Container(ID, f"/kubepods/pod1/{ID}", frozenset({0, 1, 2, 3}), hooked=True), frozenset({2, 3})),
             Unconfined(Container(other, f"/kubepods/pod2/{other}", frozenset({0, 1, 2, 3})), frozenset({2, 3}))]
    lines = text(2, found)
    assert [line.split(maxsplit=4)[-1] for line in lines[2:4]] == ["widened after the hook confined it",
                                                                    "started before the node-wide hook"]
    assert lines[4:] == [f"  fix (started before the node-wide hook): {FIX}",
                         f"  fix (widened after the hook confined it): {REASONS[Reason.WIDENED][1]}"]
