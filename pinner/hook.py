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
5. If every ``cmk hook`` entry is marked ``--exclusive`` (the daemon marks
   the devices of whole exclusive cores, unless ``--no-unthrottle-exclusive``),
   remove the CFS quota of the container's own cpu cgroup (v1
   ``cpu.cfs_quota_us`` = -1, v2 ``cpu.max`` = ``max``, period kept): nobody
   else runs on those CPUs, so a quota would only throttle the container's
   bursts. A container that also holds shared or infra CPUs keeps its quota.
   The pod's cgroup, whose quota the kubelet sets to the sum of the
   containers' limits, is never touched.

The node-wide hook (``cmk hook --node-wide=RECORD``, declared for every
container in a hooks.d file or a runtime handler's base spec by ``cmk
install --hooks-dir``) takes no ``--cpus`` of its own: a container holding
``cmk hook --cpus`` entries gets exactly what step 2 computes (the same
union, so running beside those hooks changes nothing); a container holding
none is confined to the infra pool's CPUs read from RECORD, a one-line cpu
list that only the daemon and ``cmk install`` write, atomically. No record
yet (a node whose daemon never ran): the container starts as created, so
the daemon's own pod can start; a pinned container never depends on it. A
record that is not a cpu list refuses the start (status 13).

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

Its exit statuses and help are ``HookExit`` and ``HOOK_HELP`` in
``pinner/contract.py``, beside ``cmk isolate``'s.
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
