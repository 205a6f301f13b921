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

Its exit statuses and help are ``HookExit`` and ``HOOK_HELP`` in
``pinner/contract.py``, beside ``cmk isolate``'s.
"""

#: The command line the CDI spec gives the runtime (argv[0] first, as OCI hooks take it).
ARGS = ("cmk", "hook")

#: The largest state or config.json read; real ones are a few KiB.
MAX_JSON_BYTES = 16 * 1024 * 1024
#: Nesting deeper than this is refused rather than risk the stack.
MAX_JSON_DEPTH = 128
DEFAULT_PROC_ROOT = "/proc"

NO_CPUS_HINT = (
    "request a cmk.intel.com resource so its Allocate answer sets one, "
    "or drop the cmk.intel.com/cpus CDI device"
)
