"""What the daemon and ``cmk hook`` (the OCI hook the CDI spec adds, in the static pinner) agree on.

Why it works this way: ``docs/design/hook.md``.
"""

#: The command line the CDI spec gives the runtime (argv[0] first, as OCI hooks take it), before ``--cpus``.
ARGS = ("cmk", "hook")
CPUS_OPTION = "--cpus"
#: Marks a CDI device of a whole exclusive core: a container whose entries all carry it loses its CFS quota.
EXCLUSIVE_OPTION = "--exclusive"
#: The node-wide hook's option, naming the infra record.
NODE_WIDE_OPTION = "--node-wide"
#: The infra record's file name, next to the installed binary.
RECORD_NAME = "cmk-infra-cpus"

#: The cgroup the hook creates below the container's own and moves its processes into. The container's own
#: cgroup, narrowed to its CPUs, is then the bound of whatever the container does to the cgroup it is in: a
#: root process that makes a cgroup namespace and mounts the hierarchy there sees its own cgroup as the root,
#: and may write its cpuset.cpus, but never past its parent's (``docs/design/hook.md``, "The bound").
CONFINED_CGROUP = "cmk-confined"

#: The config.json annotations in which the runtime names the pod's sandbox container (containerd, CRI-O): the
#: hook confines an unconfined sandbox to the container's CPUs, so the pod's cgroup can be narrowed.
SANDBOX_ANNOTATIONS = ("io.kubernetes.cri.sandbox-id", "io.kubernetes.cri-o.SandboxID")

#: systemd's own test that it is the system manager (``sd_booted``): this directory exists while it is PID 1.
#: There, the container's scope, the pod's slice and the sandbox's scope are systemd's, and the hook records
#: what it gives them with systemd (``docs/design/hook.md``, "A node whose cgroups systemd owns").
SYSTEMD_RUNTIME_DIR = "/run/systemd/system"
#: Where the hook looks for systemd's own client, in order (merged-/usr systems have both).
SYSTEMCTL_PATHS = ("/usr/bin/systemctl", "/bin/systemctl")
#: How long one systemctl call may take before the container's start is refused (systemd's own D-Bus
#: timeout is 25 s; the runtime waits for the hook).
SYSTEMCTL_TIMEOUT_MS = 10_000
SYSTEMD_HINT = (
    "on a node whose cgroup manager is systemd the hook records each container's CPUs with it, so that "
    "daemon-reload and runc update keep them; check that systemd answers 'systemctl show' as root"
)

#: The most child cgroups of a pod's cgroup the hook reads to narrow it; a pod holds one per container.
MAX_POD_CHILDREN = 1024

#: The largest state, config.json or procfs file read; real ones are a few KiB.
MAX_JSON_BYTES = 16 * 1024 * 1024
#: Nesting deeper than this is refused rather than risk the stack.
MAX_JSON_DEPTH = 128
DEFAULT_PROC_ROOT = "/proc"

NO_CPUS_HINT = (
    "cmk hook takes a container's CPUs only from the cmk.intel.com/cpus CDI devices the device plugin "
    "names in its Allocate answers, never from the env"
)


RECORD_HINT = (
    "the device plugin and 'cmk install' write it atomically as one cpu list; run 'cmk install' with the "
    "daemon's plan flags again, or delete the file to let containers start unconfined until the daemon writes it"
)


def command_line(cpus: str, *, exclusive: bool = False) -> list[str]:
    """The hook's argv in a CDI device's edits: ``cmk hook --cpus=1,9`` (``--exclusive`` for a whole exclusive core)."""
    return [*ARGS, f"{CPUS_OPTION}={cpus}", *([EXCLUSIVE_OPTION] if exclusive else [])]


def node_wide_command_line(record: str) -> list[str]:
    """The node-wide hook's argv in a hooks.d file or a base runtime spec: ``cmk hook --node-wide=RECORD``."""
    return [*ARGS, f"{NODE_WIDE_OPTION}={record}"]
