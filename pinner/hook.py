"""``cmk hook``: the OCI hook the CDI spec adds, confining a container to its CPUs.

The hook itself exists only in C (``pinner/native/cmk.c``): it runs on the
host, where there may be no Python, as the runtime's ``createRuntime`` hook.
This module holds its constants, so ``pinner/build.py`` generates them into
``cmk_generated.h``, the CDI spec builder (``deviceplugin/host/cdi.py``) names the
same command line, and tests compare against the same texts.

What it does, in order; every failure is one line on stderr and a distinct
non-zero status, so the runtime fails the container start showing that line
and the workload never starts unconfined:

1. Take this hook's own CPUs from its ``--cpus=LIST`` argument: the daemon
   writes one CDI device per CPU set it hands out (a core, or a slot pool),
   whose ``containerEdits`` add ``cmk hook --cpus=LIST`` as a hook.
2. Read the OCI state from stdin (``pid``, ``bundle``) and
   ``<bundle>/config.json``; take the union of the ``--cpus`` of every
   ``cmk hook`` entry in its ``hooks.createRuntime`` (one per CDI device the
   container holds, so a container holding several devices or pools gets
   all of their CPUs, and every one of those hooks computes the same union).
   This hook's own entry must be among them. The container's env is never
   read: the pod spec can set any env name, but not an OCI hook (hooks come
   only from the runtime's configuration, its hooks directories and CDI
   specs; README's "Security: what is trusted" says where in each runtime).
3. Find the init process's cpuset cgroup from ``/proc/<pid>/cgroup``: the v1
   ``cpuset`` line if there is one, else the v2 ``0::`` line, below the
   matching mount point from ``/proc/self/mountinfo`` (or ``--cgroup-root``).
4. Check the CPUs are within the parent cgroup's effective CPUs, write the
   container cgroup's ``cpuset.cpus``, then set the affinity of every task
   of the init process. Running it twice is harmless (idempotent).

Every file is opened without following a final symlink and without blocking
(the cgroup's files relative to its directory, opened once), a FIFO, device or
directory is refused, and reads stop at ``MAX_JSON_BYTES``.

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
  5   no trusted CPUs: no ``--cpus``, or config.json's ``hooks.createRuntime``
      lacks this hook's ``cmk hook --cpus=LIST`` entry
  6   a ``--cpus`` value (this hook's, or another ``cmk hook`` entry's) is not a
      cpu list, or such an entry has an unknown option
  7   the container's process is gone
  8   no cpuset cgroup for the process (not in /proc/PID/cgroup, not mounted,
      directory missing, or the cpuset controller not enabled)
  9   some CPUs are outside the parent cgroup's effective CPUs
 10   the cgroup's cpuset.cpus could not be read or written
 11   the kernel refused the affinity
====  ====================================================================
"""

PROG = "cmk hook"
#: The command line the CDI spec gives the runtime (argv[0] first, as OCI hooks take it), before ``--cpus``.
ARGS = ("cmk", "hook")
CPUS_OPTION = "--cpus"

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


HELP = """\
usage: cmk hook --cpus=LIST [--proc-root=DIR] [--cgroup-root=DIR] < OCI-STATE

An OCI createRuntime hook, added by the cmk.intel.com/cpus CDI devices the
device plugin writes (one per core or slot pool, each with its CPUs in
--cpus). It reads the container's state (pid, bundle) on stdin and its
config.json from the bundle, takes the union of the --cpus of every
'cmk hook' entry in config.json's hooks.createRuntime (this one's included),
writes them to the container's cpuset cgroup (v1 or v2) and sets the
affinity of its init process. The container's env is never read. Any
failure is one line on stderr and a non-zero status, so the runtime refuses
to start the container.

options:
  --cpus=LIST         the CPUs of the CDI device that added this hook
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
"""
