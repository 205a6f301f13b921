"""``cmk hook``: the OCI hook the CDI spec adds, confining a container to its CPUs.

The hook itself exists only in C (``pinner/native/cmk.c``): it runs on the
host, where there may be no Python, as the runtime's ``createRuntime`` hook.
This module holds its constants, so ``pinner/build.py`` generates them into
``cmk_generated.h``, the CDI spec builder (``deviceplugin/host/cdi.py``) names the
same command line, and tests compare against the same texts.

What it does, in order; every failure is one line on stderr and a distinct
non-zero status, so the runtime fails the container start showing that line
and the workload never starts unconfined:

1. Read the OCI state from stdin (``pid``, ``bundle``) and
   ``<bundle>/config.json``.
2. Take the union of the ``CMK_CPUS_*`` variables present in ``process.env``
   (the Allocate answers set one per pool the container holds). The first
   entry of a name wins, as ``getenv`` in the container sees it.
3. Find the init process's cpuset cgroup from ``/proc/<pid>/cgroup``: the v1
   ``cpuset`` line if there is one, else the v2 ``0::`` line, below the
   matching mount point from ``/proc/self/mountinfo`` (or ``--cgroup-root``).
4. Check the CPUs are within the parent cgroup's effective CPUs, write the
   container cgroup's ``cpuset.cpus``, then set the affinity of every task
   of the init process. Running it twice is harmless (idempotent).

Why ``createRuntime``: runc runs it in the runtime's namespaces after it has
created and configured the container's cgroup (so there is a cpuset to
narrow) and before the user's process is exec'd, so the workload's first
instruction already runs confined. ``prestart`` runs at the same point but
is deprecated; ``createContainer`` and ``startContainer`` run in the
container's mount namespace, where the host path of this binary and the
host's cgroup mounts are not visible.

Exit statuses:

====  ====================================================================
  0   confined, or ``--help``
  2   usage: unknown option or argument
  3   the OCI state on stdin is unreadable, not JSON, or lacks pid/bundle
  4   the container's config.json is unreadable, not JSON, or malformed
  5   the container's env holds no ``CMK_CPUS_*`` CPUs
  6   a ``CMK_CPUS_*`` value is not a cpu list
  7   the container's process is gone
  8   no cpuset cgroup for the process (not in /proc/PID/cgroup, not mounted,
      directory missing, or the cpuset controller not enabled)
  9   some CPUs are outside the parent cgroup's effective CPUs
 10   the cgroup's cpuset.cpus could not be read or written
 11   the kernel refused the affinity
====  ====================================================================
"""

from pinner.isolate import POOLS

PROG = "cmk hook"
#: The command line the CDI spec gives the runtime (argv[0] first, as OCI hooks take it).
ARGS = ("cmk", "hook")

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_STATE = 3
EXIT_CONFIG = 4
EXIT_NO_CPUS = 5
EXIT_MALFORMED = 6
EXIT_GONE = 7
EXIT_NO_CGROUP = 8
EXIT_OUTSIDE = 9
EXIT_CGROUP_WRITE = 10
EXIT_AFFINITY = 11

#: The variables read, in the pools' order; their union is the container's CPUs.
ENV_NAMES = tuple(var for var, _, _ in POOLS.values())
ENV_LIST = ", ".join(ENV_NAMES)
#: The largest state or config.json read; real ones are a few KiB.
MAX_JSON_BYTES = 16 * 1024 * 1024
#: Nesting deeper than this is refused rather than risk the stack.
MAX_JSON_DEPTH = 128
DEFAULT_PROC_ROOT = "/proc"

NO_CPUS_HINT = (
    "request a cmk.intel.com resource so its Allocate answer sets one, "
    "or drop the cmk.intel.com/cpus CDI device"
)

HELP = f"""\
usage: cmk hook [--proc-root=DIR] [--cgroup-root=DIR] < OCI-STATE

An OCI createRuntime hook, added by the cmk.intel.com/cpus CDI devices. It
reads the container's state (pid, bundle) on stdin and its config.json from
the bundle, takes the union of the CPUs in the container's env
({ENV_LIST}),
writes them to the container's cpuset cgroup (v1 or v2) and sets the
affinity of its init process. Any failure is one line on stderr and a
non-zero status, so the runtime refuses to start the container.

options:
  --proc-root=DIR     procfs to read /proc/PID/cgroup, /proc/PID/task and
                      /proc/self/mountinfo from (default: /proc)
  --cgroup-root=DIR   where the cpuset hierarchy (v1) or the unified one (v2)
                      is mounted, instead of finding it in mountinfo
  -h, --help          show this help

exit statuses:
    2  usage error             3  bad OCI state on stdin
    4  bad config.json         5  no CMK_CPUS_* CPUs in the env
    6  a CMK_CPUS_* value is not a cpu list
    7  the container's process is gone
    8  no cpuset cgroup found  9  CPUs outside the parent cgroup's
   10  cpuset.cpus not writable  11  affinity refused
"""
