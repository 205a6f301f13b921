"""The cpu-list and cpu-mask case table both parsers answer: ``deviceplugin/model/cpulist.py`` and the C pinner's ``cpulist.c``.

``tests/unit/test_cpulist.py`` runs it through Python, ``tests/pinner/test_native_units.py``
through the C unit's test driver, so the two grammars cannot drift apart.
"""

from __future__ import annotations

from deviceplugin.model.pinnercontract import MAX_CPUS

#: (text, CPUs) in the kernel form (cpuset, sysfs and record files)
LISTS: list[tuple[str, set[int]]] = [
    ("", set()),
    ("\n", set()),
    ("0", {0}),
    ("0-3,8\n", {0, 1, 2, 3, 8}),
    ("0-3,8-11", {0, 1, 2, 3, 8, 9, 10, 11}),
    (" 2 , 5-6 ", {2, 5, 6}),
    ("0-15:2/4", {0, 1, 4, 5, 8, 9, 12, 13}),
    ("1-9:1/3", {1, 4, 7}),
    ("0-3\x00\x00", {0, 1, 2, 3}),
    ("3,1,2", {1, 2, 3}),
    (f"{MAX_CPUS - 1}", {MAX_CPUS - 1}),  # one bound for every list: the kernel's largest NR_CPUS
]

#: (text, what the refusal says) in the kernel form
MALFORMED_LISTS: list[tuple[str, str]] = [
    ("a", "'a' is not a CPU number"),
    ("0-", "'' is not a CPU number"),
    ("3-1", "range '3-1' runs backwards"),
    ("1,,2", "empty entry between commas"),
    ("0-7:3", "needs USED/GROUP"),
    ("0-7:5/4", "needs 0 < USED <= GROUP"),
    ("-1", "is not a CPU number"),
    ("99999999", "out of range"),
    (f"0-{MAX_CPUS}", f"CPU {MAX_CPUS} is out of range (0-{MAX_CPUS - 1})"),
    ("\u0663", "is not a CPU number"),
    ("\u00b2", "is not a CPU number"),
    ("1" * 10, "is not a CPU number"),
]

#: (text, CPUs, or the refusal) in the env form the pinner takes in CMK_CPUS_* and --cpus: no padding,
#: no strides, not empty, any order
ENV_LISTS: list[tuple[str, set[int] | str]] = [
    ("0", {0}),
    ("7,2,3-4", {2, 3, 4, 7}),
    ("", "empty entry between commas"),
    ("0,", "empty entry between commas"),
    (" 2", "' 2' is not a CPU number"),
    ("0-3:1/2", "'3:1/2' is not a CPU number"),
    ("1-0", "range '1-0' runs backwards"),
    ("9000", f"CPU 9000 is out of range (0-{MAX_CPUS - 1})"),
    (f"{MAX_CPUS - 1}", {MAX_CPUS - 1}),
    ("\u00b2", "'??' is not a CPU number"),  # shown byte by byte, as the environment holds it
]

#: (text, CPUs) of sysfs hex masks
MASKS: list[tuple[str, set[int]]] = [
    ("00000000,0000ff0f\n", {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15}),
    ("80000000,00000001", {0, 63}),
    ("0", set()),
    ("", set()),
    ("0x3", {0, 1}),
]

MALFORMED_MASKS = ["00zz", "0x", ","]
