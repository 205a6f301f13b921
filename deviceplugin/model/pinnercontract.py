"""What the daemon and the pinner agree on: pools, env names, limits, texts and exit statuses.

One table, read by ``pinner/build.py`` to generate the static pinner's
``cmk_generated.h``, by the daemon's plan and Allocate answer and by the
tests, so no two of them can drift. Standard library only: ``setup.py`` imports the build, and so
this, at package build, before any dependency is installed. The exit tables are plain classes of
ints, distinct by name.
"""

from __future__ import annotations

from deviceplugin import __version__


class PinnerPool:
    """One pool as the pinners see it: the env its Allocate answer sets and the resource to request."""

    __slots__ = ("env", "name", "resource", "socket_aware")

    def __init__(self, name: str, env: str, resource: str, socket_aware: bool) -> None:
        self.name = name
        self.env = env
        self.resource = resource
        #: honours ``cmk isolate --socket-id`` (infra does not, as in CMK)
        self.socket_aware = socket_aware

    def __repr__(self) -> str:
        return f"PinnerPool({self.name!r}, {self.env!r}, {self.resource!r}, {self.socket_aware!r})"


#: By name, in the order the pinners list them.
POOLS: dict[str, PinnerPool] = {
    pool.name: pool
    for pool in (
        PinnerPool("exclusive", "CMK_CPUS_EXCLUSIVE", "cmk.intel.com/exclusive-cores", True),
        PinnerPool(
            "exclusive-non-isolcpus",
            "CMK_CPUS_EXCLUSIVE_NON_ISOLCPUS",
            "cmk.intel.com/exclusive-non-isolcpus-cores",
            True,
        ),
        PinnerPool("shared", "CMK_CPUS_SHARED", "cmk.intel.com/shared", True),
        PinnerPool("infra", "CMK_CPUS_INFRA", "cmk.intel.com/infra", False),
    )
}
POOL_NAMES = ", ".join(POOLS)
#: Every pool's variable, in the pools' order.
ENV_NAMES = tuple(pool.env for pool in POOLS.values())

#: What ``cmk isolate`` exports to the workload: the CPUs (comma-separated) and CMK's hex mask.
ENV_ASSIGNED = "CMK_CPUS_ASSIGNED"
ENV_ASSIGNED_MASK = "CMK_CPUS_ASSIGNED_MASK"
#: Where ``--socket-id`` reads sysfs; tests point it at topology dumps.
ENV_SYSFS_ROOT = "CMK_SYSFS_ROOT"
DEFAULT_SYSFS_ROOT = "/sys"
#: What execvp searches when PATH is unset (``os.defpath``).
DEFAULT_PATH = "/bin:/usr/bin"

#: One bound for every CPU number read anywhere: the kernel's largest NR_CPUS
#: (x86-64 MAXSMP and powerpc; arm64 stops at 4096), so no real CPU is refused
#: and a typo like ``0-999999999`` is.
MAX_CPUS = 8192
LIST_HINT = "expected CPU numbers or N-M ranges separated by commas, in any order, e.g. 2,3,10-11"

#: Fixed texts rather than strerror(), whose wording differs between glibc, musl and Python.
ERRNO_TEXT = {
    "ENOENT": "no such file or directory",
    "ENOTDIR": "not a directory",
    "EACCES": "permission denied",
    "EPERM": "operation not permitted",
    "ENOEXEC": "exec format error",
    "EISDIR": "is a directory",
    "ETXTBSY": "text file busy",
    "ELOOP": "too many levels of symbolic links",
    "ENAMETOOLONG": "file name too long",
    "E2BIG": "argument list too long",
    "ENOMEM": "out of memory",
    "EINVAL": "invalid argument",
    "EIO": "input/output error",
    "EBUSY": "device or resource busy",
    "ESRCH": "no such process",
    "EROFS": "read-only file system",
}

#: What the pinners say of a sysfs or cgroup file they refuse to open (both print the same texts).
NOT_REGULAR_TEXT = "not a regular file (a FIFO, device or directory is refused)"
SYMLINK_TEXT = "a symbolic link (not followed)"
#: The most read from a file that holds one number.
MAX_NUMBER_FILE_BYTES = 64
#: The most read from a sysfs cpu list or mask: 8,192 CPUs listed one by one take 40 KB.
MAX_LIST_FILE_BYTES = 65536


class IsolateExit:
    """``cmk isolate``'s exit statuses (the workload's own once the exec succeeded)."""

    HELP = 0
    USAGE = 2  # unknown option, missing --pool or COMMAND, bad --socket-id
    UNKNOWN_POOL = 3
    NO_CPUS = 4  # the pool's variable is unset or empty: the container holds no such CPUs
    MALFORMED = 5  # the pool's variable is not a cpu list
    NOT_ALLOWED = 6  # some of the pool's CPUs are outside this container's cpuset
    SOCKET = 7  # --socket-id: no pool CPU on that socket, or sysfs unreadable or malformed
    AFFINITY = 8  # the kernel refused the affinity, or set another one than asked
    NOT_EXECUTABLE = 126  # COMMAND found but not executable (as shells do)
    NOT_FOUND = 127  # COMMAND not found (as shells do)


class HookExit:
    """``cmk hook``'s exit statuses; any non-zero one makes the runtime refuse the container."""

    OK = 0  # confined, or --help
    USAGE = 2  # unknown option or argument
    STATE = 3  # the OCI state on stdin is unreadable, not JSON, or lacks pid/bundle
    CONFIG = 4  # the container's config.json is unreadable, not JSON, or malformed
    NO_CPUS = 5  # no trusted CPUs: no --cpus (nor --node-wide), or config.json's hooks.createRuntime lacks this hook's entry
    MALFORMED = 6  # a --cpus value (this hook's or another cmk hook entry's) is not a cpu list, or bad option
    GONE = 7  # the container's process is gone
    NO_CGROUP = 8  # no cpuset cgroup: not in /proc/PID/cgroup, not mounted, missing, or not enabled
    OUTSIDE = 9  # some CPUs are outside the parent cgroup's effective CPUs
    CGROUP_WRITE = 10  # the cgroup's cpuset.cpus could not be read or written
    AFFINITY = 11  # the kernel refused the affinity
    QUOTA = 12  # the CFS quota of an exclusive container could not be removed
    RECORD = 13  # the node's infra record is unreadable or not a cpu list
    SYSTEMD = 14  # systemd owns the container's cgroups and did not record its CPUs or quota


def exit_table(statuses: type) -> dict[str, int]:
    """``IsolateExit`` or ``HookExit`` as name -> status, in declaration order."""
    return {name: value for name, value in vars(statuses).items() if name.isupper()}


ISOLATE_PROG = "cmk isolate"
HOOK_PROG = "cmk hook"
#: What ``cmk --version`` prints, the package's and the static pinner's alike (a pinner on a node names its release).
VERSION_TEXT = f"cmk {__version__}"

_POOL_LINES = "".join(f"  {p.name:<22}  {p.env:<31}  {p.resource}\n" for p in POOLS.values())

ISOLATE_HELP = f"""\
usage: cmk isolate [--socket-id=N] --pool=POOL [--no-affinity] [--namespace=NS] COMMAND [-- ARGS...]
       cmk isolate [--socket-id=N] --pool=POOL [--no-affinity] -- COMMAND [ARGS...]

Run COMMAND confined to the CPUs this container holds in POOL. The CPUs come
from the env the device plugin's Allocate answer sets. The affinity is set,
CMK_CPUS_ASSIGNED (the CPUs, comma-separated) and CMK_CPUS_ASSIGNED_MASK (hex
mask, as CMK wrote it) are exported, and COMMAND replaces this process: it
keeps its PID and receives signals directly.

pools (env variable read; resource to request in resources.limits):
{_POOL_LINES}
options:
  --pool=POOL       pool whose CPUs to use (required)
  --socket-id=N     use only the pool's CPUs on socket (package) N, read from
                    /sys/devices/system/cpu/cpuX/topology/physical_package_id;
                    -1 (default) means any socket. Ignored for infra, as in CMK.
  --no-affinity     export the env but pin nothing: the workload pins itself
  --namespace=NS    accepted for CMK compatibility; no effect (there is no
                    ConfigMap any more)
  -h, --help        show this help

exit statuses (COMMAND's own once it runs):
    2  usage error          3  unknown pool
    4  no CPUs for the pool in the env
    5  the pool's variable is not a cpu list
    6  CPUs not allowed in this container
    7  --socket-id: no CPU on that socket, or sysfs unreadable or malformed
    8  the kernel refused the affinity, or set another one
  126  COMMAND not executable   127  COMMAND not found
"""

HOOK_HELP = """\
usage: cmk hook --cpus=LIST [--exclusive] [--proc-root=DIR] [--cgroup-root=DIR] < OCI-STATE
       cmk hook --node-wide=RECORD [--proc-root=DIR] [--cgroup-root=DIR] < OCI-STATE

An OCI createRuntime hook, added by the cmk.intel.com/cpus CDI devices the
device plugin writes (one per core or slot pool, each with its CPUs in
--cpus). It reads the container's state (pid, bundle) on stdin and its
config.json from the bundle, takes the union of the --cpus of every
'cmk hook' entry in config.json's hooks.createRuntime (this one's included),
writes them to the container's cpuset cgroup (v1 or v2) and sets the
affinity of its init process. If every such entry is --exclusive, it also
removes the CFS quota of the container's cpu cgroup. Where systemd is the
cgroup manager (a scope or slice systemd owns), each cgroup's CPUs and the
quota's removal are recorded with systemd first (systemctl set-property
--runtime), so its daemon-reload and runc update keep them. The container's
env is never read. Any failure is one line on stderr and a non-zero status, so the
runtime refuses to start the container.

--node-wide runs for every container (hooks.d, or a base runtime spec): a
container with cmk hook entries gets their union as above; one without is
confined to the infra CPUs in RECORD. No RECORD yet: it starts as created.

options:
  --cpus=LIST         the CPUs of the CDI device that added this hook
  --exclusive         that device is a whole exclusive core
  --node-wide=RECORD  the node-wide hook; RECORD holds the infra CPUs
  --proc-root=DIR     procfs to read /proc/PID/cgroup, /proc/PID/task and
                      /proc/self/mountinfo from (default: /proc)
  --cgroup-root=DIR   where the cpuset hierarchy (v1) or the unified one (v2)
                      is mounted, instead of finding it in mountinfo
  -h, --help          show this help

exit statuses:
    2  usage error             3  bad OCI state on stdin
    4  bad config.json         5  no trusted CPUs (no --cpus, or not in config.json)
    6  a --cpus value is not a cpu list
    7  the container's process is gone
    8  no cpuset cgroup found  9  CPUs outside the parent cgroup's
   10  cpuset.cpus not writable  11  affinity refused
   12  CFS quota not removable   13  bad infra RECORD
   14  systemd did not record the CPUs or quota
"""
