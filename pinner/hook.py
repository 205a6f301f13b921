"""``cmk hook``: the OCI hook the CDI spec adds, confining a container to its CPUs.

Why it works this way: ``docs/hook.md``.
"""

#: The command line the CDI spec gives the runtime (argv[0] first, as OCI hooks take it), before ``--cpus``.
ARGS = ("cmk", "hook")
CPUS_OPTION = "--cpus"

#: The largest state, config.json or procfs file read; real ones are a few KiB.
MAX_JSON_BYTES = 16 * 1024 * 1024
#: Nesting deeper than this is refused rather than risk the stack.
MAX_JSON_DEPTH = 128
DEFAULT_PROC_ROOT = "/proc"

NO_CPUS_HINT = (
    "cmk hook takes a container's CPUs only from the cmk.intel.com/cpus CDI devices the device plugin "
    "names in its Allocate answers, never from the env"
)


def command_line(cpus: str) -> list[str]:
    """The hook's argv in a CDI device's edits: ``cmk hook --cpus=1,9``."""
    return [*ARGS, f"{CPUS_OPTION}={cpus}"]
