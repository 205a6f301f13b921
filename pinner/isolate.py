"""``cmk isolate``: confine a command to the CPUs of one pool, then become it.

The device plugin's Allocate answer puts the container's CPUs in its env
(``CMK_CPUS_EXCLUSIVE``, ``CMK_CPUS_EXCLUSIVE_NON_ISOLCPUS``, ``CMK_CPUS_SHARED``,
``CMK_CPUS_INFRA``). This reads the chosen pool's list, checks the container
may use those CPUs, sets the affinity, exports ``CMK_CPUS_ASSIGNED`` and
``CMK_CPUS_ASSIGNED_MASK`` and execs the command in place, so no wrapper stays
behind: the workload keeps the pinner's PID (PID 1 in a container) and gets
the pod's SIGTERM directly.

This module imports only the interpreter's built-in ``errno``, ``posix`` and
``sys`` (not ``os``: its import alone costs about 10% of a bare ``python3 -I -S``
start) and nothing else from its package; ``pinner/cmk_isolate.py`` runs it
under ``python3 -I -S`` at interpreter speed.

Which CPUs "this container may use" means its cpuset, not the affinity it was
started with: since Linux 6.2 a task joining a cpuset keeps the affinity it
inherited, so unless the runtime resets it (runc 1.3.1+, crun 1.10+) a
container starts with the runtime's affinity, which on an isolcpus node is the
housekeeping CPUs and excludes the very CPUs of the exclusive pool. A task may
always widen its own affinity within its cpuset, so the pinner asks the kernel:
it requests every CPU, and the kernel answers with the ones the cpuset allows.

``pinner/native/cmk.c`` is the same program in C for images without Python;
``pinner/build.py`` generates its exit statuses, pool table, error texts and
help from the constants below, and one test table checks that both give the
same messages and statuses.

Exit statuses (the workload's own status once the exec succeeded):

====  =======================================================================
  0   ``--help``
  2   usage: unknown option, missing ``--pool`` or COMMAND, bad ``--socket-id``
  3   unknown pool
  4   the pool's variable is unset or empty: the container holds no such CPUs
  5   the pool's variable is not a cpu list
  6   some of the pool's CPUs are not allowed in this container (its cpuset)
  7   ``--socket-id``: no pool CPU on that socket, or sysfs unreadable
  8   the kernel refused the affinity, or set another one than asked
126   COMMAND found but not executable (as shells do)
127   COMMAND not found (as shells do)
====  =======================================================================
"""

import errno
import posix
import sys

from pinner.cpulist import format_cpu_list, format_cpu_mask

PROG = "cmk isolate"

EXIT_HELP = 0
EXIT_USAGE = 2
EXIT_UNKNOWN_POOL = 3
EXIT_NO_CPUS = 4
EXIT_MALFORMED = 5
EXIT_NOT_ALLOWED = 6
EXIT_SOCKET = 7
EXIT_AFFINITY = 8
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127

# pool -> (env variable, extended resource, honours --socket-id as CMK did). The contract with the
# device plugin: deviceplugin.model.plan and deviceplugin.model.answers take resource and env names from here.
POOLS = {
    "exclusive": ("CMK_CPUS_EXCLUSIVE", "cmk.intel.com/exclusive-cores", True),
    "exclusive-non-isolcpus": (
        "CMK_CPUS_EXCLUSIVE_NON_ISOLCPUS",
        "cmk.intel.com/exclusive-non-isolcpus-cores",
        True,
    ),
    "shared": ("CMK_CPUS_SHARED", "cmk.intel.com/shared", True),
    "infra": ("CMK_CPUS_INFRA", "cmk.intel.com/infra", False),
}
POOL_NAMES = ", ".join(POOLS)

MAX_CPUS = 8192  # the kernel's largest NR_CPUS
ALL_CPUS = range(MAX_CPUS)  # asked for to learn the cpuset: the kernel drops what it does not allow
ENV_ASSIGNED = "CMK_CPUS_ASSIGNED"
ENV_ASSIGNED_MASK = "CMK_CPUS_ASSIGNED_MASK"
ENV_SYSFS_ROOT = "CMK_SYSFS_ROOT"  # where --socket-id reads sysfs; tests point it at topology dumps
DEFAULT_SYSFS_ROOT = "/sys"
DEFAULT_PATH = "/bin:/usr/bin"  # os.defpath: what execvp searches when PATH is unset
NOT_FOUND = (errno.ENOENT, errno.ENOTDIR)  # keep searching PATH; status 127 if nothing else
LIST_HINT = "expected ascending CPU numbers separated by commas, e.g. 2,3,10"

# Fixed texts rather than strerror(), whose wording differs between glibc, musl
# and Python; the C pinner gets this table from pinner/build.py.
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

HELP = """\
usage: cmk isolate [--socket-id=N] --pool=POOL [--no-affinity] [--namespace=NS] COMMAND [-- ARGS...]
       cmk isolate [--socket-id=N] --pool=POOL [--no-affinity] -- COMMAND [ARGS...]

Run COMMAND confined to the CPUs this container holds in POOL. The CPUs come
from the env the device plugin's Allocate answer sets. The affinity is set,
CMK_CPUS_ASSIGNED (the CPUs, comma-separated) and CMK_CPUS_ASSIGNED_MASK (hex
mask, as CMK wrote it) are exported, and COMMAND replaces this process: it
keeps its PID and receives signals directly.

pools (env variable read; resource to request in resources.limits):
  exclusive               CMK_CPUS_EXCLUSIVE               cmk.intel.com/exclusive-cores
  exclusive-non-isolcpus  CMK_CPUS_EXCLUSIVE_NON_ISOLCPUS  cmk.intel.com/exclusive-non-isolcpus-cores
  shared                  CMK_CPUS_SHARED                  cmk.intel.com/shared
  infra                   CMK_CPUS_INFRA                   cmk.intel.com/infra

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
    7  --socket-id: no CPU on that socket, or sysfs unreadable
    8  the kernel refused the affinity, or set another one
  126  COMMAND not executable   127  COMMAND not found
"""


class IsolateError(Exception):
    """A problem the user can fix: one line on stderr and a distinct exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Request:
    """The parsed command line."""

    __slots__ = ("args", "command", "help", "no_affinity", "pool", "socket_id")

    def __init__(self) -> None:
        self.pool: str | None = None
        self.socket_id = -1
        self.no_affinity = False
        self.command: str | None = None
        self.args: list[str] = []
        self.help = False


# ---- pure logic ------------------------------------------------------------


def shown(text: str | bytes) -> str:
    """User-supplied text made safe for a one-line message: non-printable bytes become '?'.

    Works on bytes so Python and C replace exactly the same characters.
    """
    raw = text.encode(sys.getfilesystemencoding(), "surrogateescape") if isinstance(text, str) else text
    return "".join(chr(b) if 0x20 <= b < 0x7F else "?" for b in raw)


def usage_error(message: str) -> IsolateError:
    return IsolateError(f"{message} (see '{PROG} --help')", EXIT_USAGE)


def parse_socket_id(value: str) -> int:
    if value == "-1" or (value.isdigit() and value.isascii() and len(value) <= 9):
        return int(value)
    raise usage_error(f"--socket-id must be a socket number or -1 for any socket, not '{shown(value)}'")


def parse_args(argv: list[str]) -> Request:
    """Parse CMK's ``[OPTIONS] COMMAND [-- ARGS]`` and the plain ``[OPTIONS] -- COMMAND ARGS``.

    As in CMK (docopt), options may also stand between COMMAND and ``--``;
    everything after the first ``--`` is passed on untouched.
    """
    req = Request()
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            if req.command is None:
                if i >= len(argv):
                    break
                req.command = argv[i]
                i += 1
            req.args = argv[i:]
            break
        if token in ("-h", "--help"):
            req.help = True
            return req
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if name == "--no-affinity":
                if eq:
                    raise usage_error("option --no-affinity takes no value")
                req.no_affinity = True
                continue
            if name not in ("--pool", "--socket-id", "--namespace"):
                raise usage_error(f"unknown option '{shown(name)}'" + after_command_hint(req))
            if not eq:
                if i >= len(argv):
                    raise usage_error(f"option {name} needs a value")
                value = argv[i]
                i += 1
            if name == "--pool":
                req.pool = value
            elif name == "--socket-id":
                req.socket_id = parse_socket_id(value)
            continue
        if token.startswith("-") and token != "-":
            raise usage_error(f"unknown option '{shown(token)}'" + after_command_hint(req))
        if req.command is not None:
            raise usage_error(
                f"unexpected argument '{shown(token)}' after COMMAND '{shown(req.command)}'"
                + after_command_hint(req)
            )
        req.command = token
    if req.pool is None:
        raise usage_error(f"missing --pool=POOL (one of: {POOL_NAMES})")
    if not req.command:
        raise usage_error("missing COMMAND to run")
    return req


def after_command_hint(req: Request) -> str:
    return " (the command's arguments go after '--')" if req.command is not None else ""


def parse_env_cpus(var: str, raw: bytes) -> list[int]:
    """Parse a ``CMK_CPUS_*`` value: CPU numbers (or ``N-M`` ranges) separated by commas."""

    def fail(detail: str) -> IsolateError:
        return IsolateError(
            f"{var}='{shown(raw)}' is not a cpu list: {detail} ({LIST_HINT})", EXIT_MALFORMED
        )

    def number(token: bytes) -> int:
        if not token or not token.isdigit() or len(token) > 9:
            raise fail(f"'{shown(token)}' is not a CPU number")
        value = int(token)
        if value >= MAX_CPUS:
            raise fail(f"CPU {value} is out of range (0-{MAX_CPUS - 1})")
        return value

    cpus: set[int] = set()
    for entry in raw.split(b","):
        if not entry:
            raise fail("empty entry between commas")
        first, dash, last = entry.partition(b"-")
        low = number(first)
        high = number(last) if dash else low
        if high < low:
            raise fail(f"range '{shown(entry)}' runs backwards")
        cpus.update(range(low, high + 1))
    return sorted(cpus)


def pool_cpus(pool: str, environ: dict[bytes, bytes]) -> list[int]:
    """The CPUs the Allocate answer gave this container in ``pool``."""
    if pool not in POOLS:
        raise IsolateError(f"unknown pool '{shown(pool)}': choose one of {POOL_NAMES}", EXIT_UNKNOWN_POOL)
    var, resource, _ = POOLS[pool]
    raw = environ.get(var.encode())
    if not raw:
        state = "is not set" if raw is None else "is empty"
        raise IsolateError(
            f"this container holds no {pool} CPUs ({var} {state}): request {resource} in resources.limits",
            EXIT_NO_CPUS,
        )
    return parse_env_cpus(var, raw)


def check_allowed(pool: str, cpus: list[int], allowed: set[int]) -> None:
    """Refuse CPUs outside the container's cpuset rather than run unpinned or half-pinned."""
    missing = [cpu for cpu in cpus if cpu not in allowed]
    if missing:
        noun, verb = ("CPU", "is") if len(missing) == 1 else ("CPUs", "are")
        raise IsolateError(
            f"{noun} {format_cpu_list(missing)} of the {pool} pool {verb} not allowed in this container "
            f"(allowed: {format_cpu_list(sorted(allowed))})",
            EXIT_NOT_ALLOWED,
        )


def check_pinned(cpus: list[int], got: set[int]) -> None:
    """Refuse a pin the kernel narrowed or moved (the cpuset changed under us): never a partial pin."""
    if got != set(cpus):
        raise IsolateError(
            f"cannot pin to CPUs {format_cpu_list(cpus)}: the kernel set CPUs {format_cpu_list(sorted(got))} "
            "(did the container's cpuset change?)",
            EXIT_AFFINITY,
        )


def on_socket(pool: str, cpus: list[int], socket_id: int, packages: list[int]) -> list[int]:
    """Keep the CPUs whose package is ``socket_id``; ``packages[i]`` is that of ``cpus[i]``."""
    kept = [cpu for cpu, package in zip(cpus, packages) if package == socket_id]
    if not kept:
        sockets = ",".join(str(p) for p in sorted(set(packages)))
        raise IsolateError(
            f"none of the {pool} pool's CPUs ({format_cpu_list(cpus)}) is on socket {socket_id} "
            f"(they are on socket {sockets}): use one of those with --socket-id, or -1 for any",
            EXIT_SOCKET,
        )
    return kept


def errno_text(number: int) -> str:
    return ERRNO_TEXT.get(errno.errorcode.get(number, ""), f"errno {number}")


# ---- I/O at the edges ------------------------------------------------------


def read_small_file(path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file ``path``, which is opened without following a
    final symlink and without blocking: a FIFO, device or directory there is refused, never waited on.

    Raises OSError, with ``strerror`` set to one of the texts above for what is refused.
    """
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_NONBLOCK | posix.O_NOFOLLOW | posix.O_CLOEXEC
                        | posix.O_NOCTTY)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, SYMLINK_TEXT) from None
        raise
    try:
        if posix.fstat(fd).st_mode & 0o170000 != 0o100000:  # S_ISREG, without importing stat
            raise OSError(errno.EINVAL, NOT_REGULAR_TEXT)
        return posix.read(fd, limit)
    finally:
        posix.close(fd)


def file_error_text(err: OSError) -> str:
    return err.strerror if err.strerror in (SYMLINK_TEXT, NOT_REGULAR_TEXT) else errno_text(err.errno or 0)


def read_package(root: str, cpu: int) -> int:
    path = f"{root}/devices/system/cpu/cpu{cpu}/topology/physical_package_id"
    try:
        text = read_small_file(path, MAX_NUMBER_FILE_BYTES).replace(b"\0", b"").strip()
    except OSError as err:
        raise socket_read_error(cpu, path, file_error_text(err)) from None
    digits = text.removeprefix(b"-")
    if not digits.isdigit() or len(digits) > 9:
        raise socket_read_error(cpu, path, f"'{shown(text)}' is not a number")
    return int(text)


def socket_read_error(cpu: int, path: str, detail: str) -> IsolateError:
    return IsolateError(
        f"cannot read the socket of CPU {cpu} from {shown(path)}: {detail} "
        "(--socket-id needs sysfs; use --socket-id=-1 for any socket)",
        EXIT_SOCKET,
    )


def affinity_error(what: str, err: OSError) -> IsolateError:
    return IsolateError(f"{what}: {errno_text(err.errno or 0)}", EXIT_AFFINITY)


def get_affinity(what: str) -> set[int]:
    try:
        return posix.sched_getaffinity(0)
    except OSError as err:
        raise affinity_error(what, err) from None


def set_affinity(cpus: list[int] | set[int] | range, what: str) -> None:
    try:
        posix.sched_setaffinity(0, cpus)
    except OSError as err:
        raise affinity_error(what, err) from None


def pin(cpus: list[int]) -> None:
    """Pin to ``cpus`` and read back what the kernel really set."""
    what = f"cannot pin to CPUs {format_cpu_list(cpus)}"
    set_affinity(cpus, what)
    check_pinned(cpus, get_affinity(what))


def cpuset_cpus() -> tuple[set[int], set[int]]:
    """(the CPUs this container's cpuset allows, the affinity this process started with).

    The kernel intersects any request with the cpuset (every kernel version),
    so asking for all CPUs yields the cpuset even when the affinity inherited
    from the runtime is narrower. This process is left on that set; the caller
    pins or restores. If the kernel refuses to widen it (a seccomp filter, say),
    the affinity already held is the best answer there is, as before.
    """
    started = get_affinity("cannot read this process's allowed CPUs")
    try:
        posix.sched_setaffinity(0, ALL_CPUS)
    except OSError:
        return started, started
    return get_affinity("cannot read this process's allowed CPUs"), started


def getenv(environ: dict[bytes, bytes], name: str) -> str | None:
    value = environ.get(name.encode())
    return None if value is None else value.decode(sys.getfilesystemencoding(), "surrogateescape")


def exec_command(command: str, args: list[str], environ: dict[bytes, bytes]) -> IsolateError:
    """Replace this process with ``command``; on failure return the error (126/127, as shells).

    Searches PATH as ``os.execvp`` does: ENOENT/ENOTDIR mean "try the next
    directory", any other error is remembered and reported if nothing runs.
    """
    argv = [command, *args]
    where = None  # the PATH searched, "" included (as the static pinner reports it)
    if "/" in command:
        candidates = [command]
    else:
        path = getenv(environ, "PATH")
        if path is None:
            path = DEFAULT_PATH
        candidates = [f"{d}/{command}" if d else command for d in path.split(":")]
        where = path
    first_other = 0
    last = 0
    for candidate in candidates:
        try:
            posix.execve(candidate, argv, environ)
        except OSError as err:
            last = err.errno or 0
            if last not in NOT_FOUND and not first_other:
                first_other = last
    number = first_other or last
    if number in NOT_FOUND:
        if where is not None:
            return IsolateError(f"{shown(command)}: command not found (searched PATH={shown(where)})", EXIT_NOT_FOUND)
        return IsolateError(f"{shown(command)}: {errno_text(number)}", EXIT_NOT_FOUND)
    return IsolateError(f"{shown(command)}: cannot execute: {errno_text(number)}", EXIT_NOT_EXECUTABLE)


def run(argv: list[str]) -> IsolateError | None:
    """Everything but printing: returns the error, or None for --help; on success never returns."""
    req = parse_args(argv)
    if req.help:
        return None
    pool, command = req.pool, req.command
    assert pool is not None and command is not None  # parse_args refuses a line without them
    environ = dict(posix.environ)
    cpus = pool_cpus(pool, environ)
    allowed, started = cpuset_cpus()
    check_allowed(pool, cpus, allowed)
    if req.socket_id != -1 and POOLS[pool][2]:
        root = getenv(environ, ENV_SYSFS_ROOT) or DEFAULT_SYSFS_ROOT
        cpus = on_socket(pool, cpus, req.socket_id, [read_package(root, cpu) for cpu in cpus])
    if not req.no_affinity:
        pin(cpus)
    elif allowed != started:  # the workload pins itself: give back the affinity it came with
        set_affinity(started, f"cannot restore this process's CPUs {format_cpu_list(sorted(started))}")
    environ[ENV_ASSIGNED.encode()] = ",".join(map(str, cpus)).encode()
    environ[ENV_ASSIGNED_MASK.encode()] = format_cpu_mask(cpus).encode()
    return exec_command(command, req.args, environ)


def main(argv: list[str] | None = None) -> int:
    try:
        error = run(sys.argv[1:] if argv is None else argv)
    except IsolateError as err:
        error = err
    if error is None:
        sys.stdout.write(HELP)
        return EXIT_HELP
    sys.stderr.write(f"{PROG}: error: {error}\n")
    return error.status


if __name__ == "__main__":
    sys.exit(main())
