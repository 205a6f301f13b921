"""``cmk isolate``: confine a command to the CPUs of one pool, then become it.

Why it works this way: ``docs/design/pinner.md``.
"""

import errno
import posix
import sys

from pinner.contract import (
    DEFAULT_PATH,
    DEFAULT_SYSFS_ROOT,
    ENV_ASSIGNED,
    ENV_ASSIGNED_MASK,
    ENV_SYSFS_ROOT,
    ERRNO_TEXT,
    ISOLATE_HELP,
    ISOLATE_PROG,
    LIST_HINT,
    MAX_CPUS,
    MAX_LIST_FILE_BYTES,
    MAX_NUMBER_FILE_BYTES,
    NOT_REGULAR_TEXT,
    POOL_NAMES,
    POOLS,
    SYMLINK_TEXT,
    IsolateExit,
)
from pinner.cpulist import (
    CpuListError,
    format_cpu_list,
    format_cpu_mask,
    parse_cpu_list,
    shown,
)

ALL_CPUS = range(MAX_CPUS)  # asked for to learn the cpuset: the kernel drops what it does not allow
NOT_FOUND = (errno.ENOENT, errno.ENOTDIR)  # keep searching PATH; status 127 if nothing else


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


def usage_error(message: str) -> IsolateError:
    return IsolateError(f"{message} (see '{ISOLATE_PROG} --help')", IsolateExit.USAGE)


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
    try:
        # decoded as getenv() would, so shown() gives back the very bytes the C pinner shows
        return sorted(parse_cpu_list(raw.decode(sys.getfilesystemencoding(), "surrogateescape"), env=True))
    except CpuListError as err:
        raise IsolateError(
            f"{var}='{shown(raw)}' is not a cpu list: {err.detail} ({LIST_HINT})", IsolateExit.MALFORMED
        ) from None


def pool_cpus(pool: str, environ: dict[bytes, bytes]) -> list[int]:
    """The CPUs the Allocate answer gave this container in ``pool``."""
    if pool not in POOLS:
        raise IsolateError(f"unknown pool '{shown(pool)}': choose one of {POOL_NAMES}", IsolateExit.UNKNOWN_POOL)
    var, resource = POOLS[pool].env, POOLS[pool].resource
    raw = environ.get(var.encode())
    if not raw:
        state = "is not set" if raw is None else "is empty"
        raise IsolateError(
            f"this container holds no {pool} CPUs ({var} {state}): request {resource} in resources.limits",
            IsolateExit.NO_CPUS,
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
            IsolateExit.NOT_ALLOWED,
        )


def check_pinned(cpus: list[int], got: set[int]) -> None:
    """Refuse a pin the kernel narrowed or moved (the cpuset changed under us): never a partial pin."""
    if got != set(cpus):
        raise IsolateError(
            f"cannot pin to CPUs {format_cpu_list(cpus)}: the kernel set CPUs {format_cpu_list(sorted(got))} "
            "(did the container's cpuset change?)",
            IsolateExit.AFFINITY,
        )


def on_socket(pool: str, cpus: list[int], socket_id: int, packages: list[int]) -> list[int]:
    """Keep the CPUs whose package is ``socket_id``; ``packages[i]`` is that of ``cpus[i]``."""
    kept = [cpu for cpu, package in zip(cpus, packages) if package == socket_id]
    if not kept:
        sockets = ",".join(str(p) for p in sorted(set(packages)))
        raise IsolateError(
            f"none of the {pool} pool's CPUs ({format_cpu_list(cpus)}) is on socket {socket_id} "
            f"(they are on socket {sockets}): use one of those with --socket-id, or -1 for any",
            IsolateExit.SOCKET,
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


def cpu_dir(root: str, cpu: int) -> str:
    return f"{root}/devices/system/cpu/cpu{cpu}"


def cleaned(raw: bytes) -> bytes:
    """A sysfs file's text as the daemon reads it: NULs dropped, surrounding whitespace trimmed."""
    return raw.replace(b"\0", b"").strip()


def read_sysfs(what: str, path: str, limit: int, *, missing_ok: bool = False) -> bytes | None:
    """The cleaned text of a sysfs file of at most ``limit`` bytes; ``None`` if ``missing_ok`` and it is not there."""
    try:
        raw = read_small_file(path, limit + 1)
    except OSError as err:
        if missing_ok and err.errno in NOT_FOUND:
            return None
        raise sysfs_error(what, path, file_error_text(err)) from None
    if len(raw) > limit:
        raise sysfs_error(what, path, f"longer than {limit} bytes")
    return cleaned(raw)


def parse_package(what: str, path: str, text: bytes) -> int:
    """A ``physical_package_id``; -1 (any negative) means the kernel does not know it."""
    digits = text.removeprefix(b"-")
    if not digits.isdigit() or len(digits) > 9:
        raise sysfs_error(what, path, f"'{shown(text)}' is not a number")
    return max(int(text), -1)


def read_package(root: str, cpu: int) -> int:
    path = f"{cpu_dir(root, cpu)}/topology/physical_package_id"
    what = f"the socket of CPU {cpu}"
    try:
        text = cleaned(read_small_file(path, MAX_NUMBER_FILE_BYTES))
    except OSError as err:
        raise sysfs_error(what, path, file_error_text(err)) from None
    return parse_package(what, path, text)


def parse_sysfs_cpus(what: str, path: str, text: bytes, *, mask: bool = False) -> frozenset[int]:
    """A cleaned sysfs cpu list (``0-3,8``), or with ``mask`` a hex mask (``0000ff0f,00000000``)."""
    if not text:
        return frozenset()
    if mask:
        digits = text.replace(b",", b"")
        value = int(digits, 16) if digits and not text.strip(b"0123456789abcdefABCDEF,") else -1
        if 0 <= value < 1 << MAX_CPUS:
            return frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)
        raise sysfs_error(what, path, f"'{shown(text)}' is not a cpu mask")
    try:
        return parse_cpu_list(text.decode("ascii"), env=True)
    except (CpuListError, UnicodeDecodeError):
        raise sysfs_error(what, path, f"'{shown(text)}' is not a cpu list") from None


def is_dir(path: str) -> bool:
    try:
        return posix.stat(path).st_mode & 0o170000 == 0o040000  # S_ISDIR, without importing stat
    except OSError:
        return False


def online_cpus(root: str) -> list[int]:
    """The online CPUs, as the daemon finds them: ``cpu/online``, else each ``cpuN/online`` flag, else
    every ``cpuN`` with a ``topology`` folder (old kernels and machine dumps have no ``online``)."""
    cpu_root = f"{root}/devices/system/cpu"
    what = "the online CPUs"
    path = f"{cpu_root}/online"
    listed = parse_sysfs_cpus(what, path, read_sysfs(what, path, MAX_LIST_FILE_BYTES, missing_ok=True) or b"")
    if listed:
        return sorted(listed)
    try:
        names = posix.listdir(cpu_root)
    except OSError as err:
        raise sysfs_error(what, cpu_root, errno_text(err.errno or 0)) from None
    online = []
    for name in names:
        digits = name[3:]
        if not (name[:3] == "cpu" and digits.isascii() and digits.isdigit() and len(digits) <= 9
                and int(digits) < MAX_CPUS and is_dir(f"{cpu_root}/{name}")):
            continue
        flag_path = f"{cpu_root}/{name}/online"
        flag = read_sysfs(what, flag_path, MAX_NUMBER_FILE_BYTES, missing_ok=True)
        if flag and flag not in (b"0", b"1"):
            raise sysfs_error(what, flag_path, f"'{shown(flag)}' is not 0 or 1")
        if flag == b"1" or (not flag and is_dir(f"{cpu_root}/{name}/topology")):
            online.append(int(digits))
    return sorted(online)


def derived_packages(root: str) -> dict[int, int]:
    """Every online CPU's package number where the kernel gives -1, numbered as the daemon numbers them.

    Reads every id first, then the lists, as the C pinner does, so both report the same file first.
    Imported here, not at the top: only machines without package ids pay for it at start.
    """
    from pinner.packages import PACKAGE_LIST_FILES, number_packages

    online = online_cpus(root)
    ids: dict[int, int] = {}
    for cpu in online:
        what, path = f"the socket of CPU {cpu}", f"{cpu_dir(root, cpu)}/topology/physical_package_id"
        text = read_sysfs(what, path, MAX_NUMBER_FILE_BYTES, missing_ok=True)
        ids[cpu] = -1 if text is None else parse_package(what, path, text)
    lists: dict[int, frozenset[int]] = {}
    for cpu in (cpu for cpu in online if ids[cpu] == -1):
        for name in PACKAGE_LIST_FILES:
            what, path = f"the socket of CPU {cpu}", f"{cpu_dir(root, cpu)}/topology/{name}"
            text = read_sysfs(what, path, MAX_LIST_FILE_BYTES, missing_ok=True)
            if text is not None:
                lists[cpu] = parse_sysfs_cpus(what, path, text, mask=not name.endswith("_list"))
                break
    return number_packages({cpu: package for cpu, package in ids.items() if package >= 0}, lists)


def packages_of(root: str, cpus: list[int]) -> list[int]:
    """Each CPU's socket for ``--socket-id``: its ``physical_package_id``, or where that is -1 the number
    the daemon derives from the package lists (:mod:`pinner.packages`)."""
    ids = [read_package(root, cpu) for cpu in cpus]
    if -1 not in ids:
        return ids
    derived = derived_packages(root)
    for i, cpu in enumerate(cpus):
        if ids[i] == -1:
            if cpu not in derived:
                from pinner.packages import UNKNOWN_PACKAGE_TEXT

                raise sysfs_error(f"the socket of CPU {cpu}", f"{cpu_dir(root, cpu)}/topology/physical_package_id",
                                  UNKNOWN_PACKAGE_TEXT)
            ids[i] = derived[cpu]
    return ids


def sysfs_error(what: str, path: str, detail: str) -> IsolateError:
    return IsolateError(
        f"cannot read {what} from {shown(path)}: {detail} "
        "(--socket-id needs sysfs; use --socket-id=-1 for any socket)",
        IsolateExit.SOCKET,
    )


def affinity_error(what: str, err: OSError) -> IsolateError:
    return IsolateError(f"{what}: {errno_text(err.errno or 0)}", IsolateExit.AFFINITY)


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
            return IsolateError(f"{shown(command)}: command not found (searched PATH={shown(where)})", IsolateExit.NOT_FOUND)
        return IsolateError(f"{shown(command)}: {errno_text(number)}", IsolateExit.NOT_FOUND)
    return IsolateError(f"{shown(command)}: cannot execute: {errno_text(number)}", IsolateExit.NOT_EXECUTABLE)


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
    if req.socket_id != -1 and POOLS[pool].socket_aware:
        root = getenv(environ, ENV_SYSFS_ROOT) or DEFAULT_SYSFS_ROOT
        cpus = on_socket(pool, cpus, req.socket_id, packages_of(root, cpus))
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
        sys.stdout.write(ISOLATE_HELP)
        return IsolateExit.HELP
    sys.stderr.write(f"{ISOLATE_PROG}: error: {error}\n")
    return error.status


if __name__ == "__main__":
    sys.exit(main())
