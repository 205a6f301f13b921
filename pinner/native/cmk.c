/*
 * cmk: the self-contained pinner, for workload images without Python or libc.
 *
 * The same program as pinner/isolate.py (read that file's docstring for the
 * behaviour and the exit-status table): one command line, one set of
 * messages, one set of exit statuses, checked by one shared test table. The
 * constants come from cmk_generated.h, generated from pinner/isolate.py.
 *
 * Linked statically (musl preferred) so it runs from a read-only mount in a
 * busybox-static, distroless or scratch image. It allocates little, writes
 * each error as one write(2), and execs the command in place.
 *
 * main() dispatches on a subcommand: `isolate` (in the workload's container)
 * or `hook` (the OCI hook the CDI spec adds, run by the runtime on the host;
 * see pinner/hook.py).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cmk_generated.h"

#define WORD_BITS (8 * sizeof(unsigned long))
#define MASK_WORDS (MAX_CPUS / WORD_BITS)

/* ---- small tools --------------------------------------------------------- */

typedef struct {
    unsigned long w[MASK_WORDS];
} cpuset;

static int cs_has(const cpuset *s, unsigned cpu)
{
    return (int)((s->w[cpu / WORD_BITS] >> (cpu % WORD_BITS)) & 1UL);
}

static void cs_add(cpuset *s, unsigned cpu)
{
    s->w[cpu / WORD_BITS] |= 1UL << (cpu % WORD_BITS);
}

/* A growable string: messages quote user input of any length, as Python's do. */
typedef struct {
    char *p;
    size_t len, cap;
} str;

static void out_of_memory(void)
{
    static const char m[] = "cmk: error: out of memory\n";
    if (write(2, m, sizeof m - 1) < 0) {
        /* nothing more to do */
    }
    _exit(1);
}

/* Room for n more bytes and the terminator. */
static void s_reserve(str *s, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->len + n + 1) * 2;
        char *p = realloc(s->p, cap);
        if (!p)
            out_of_memory();
        s->p = p;
        s->cap = cap;
    }
}

static void s_addn(str *s, const char *t, size_t n)
{
    s_reserve(s, n);
    if (n) /* t may be an empty string's NULL buffer: memcpy(dst, NULL, 0) is undefined */
        memcpy(s->p + s->len, t, n);
    s->len += n;
    s->p[s->len] = '\0';
}

static void s_add(str *s, const char *t)
{
    s_addn(s, t, strlen(t));
}

/* Formats into s at any length: the text is measured first, so no path or message is ever cut. */
__attribute__((format(printf, 2, 3))) static void s_addf(str *s, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap); /* the length it needs */
    va_end(ap);
    if (n > 0) {
        s_reserve(s, (size_t)n);
        vsnprintf(s->p + s->len, (size_t)n + 1, fmt, again);
        s->len += (size_t)n;
    }
    va_end(again);
}

/* User text made safe for a one-line message: bytes outside printable ASCII become '?'. */
static void s_shown_n(str *s, const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = (t[i] >= 0x20 && t[i] < 0x7f) ? t[i] : '?';
        s_addn(s, &c, 1);
    }
}

static void s_shown(str *s, const char *t)
{
    s_shown_n(s, t, strlen(t));
}

/* CPUs in the kernel's list form (0-2,5), ascending. */
static void s_ranges(str *s, const cpuset *set)
{
    int first = 1;
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        if (!cs_has(set, c))
            continue;
        unsigned end = c;
        while (end + 1 < MAX_CPUS && cs_has(set, end + 1))
            end++;
        s_add(s, first ? "" : ",");
        if (end == c)
            s_addf(s, "%u", c);
        else
            s_addf(s, "%u-%u", c, end);
        first = 0;
        c = end;
    }
}

/* Not errno values: what open_regular refuses on its own (texts shared with isolate.py). */
#define E_NOT_REGULAR 0x10000
#define E_SYMLINK 0x10001

static void s_errno(str *s, int e)
{
    if (e == E_NOT_REGULAR || e == E_SYMLINK) {
        s_add(s, e == E_NOT_REGULAR ? NOT_REGULAR_TEXT : SYMLINK_TEXT);
        return;
    }
#define ERRNO_CASE(name, text) \
    case name:                 \
        s_add(s, text);        \
        return;
    switch (e) {
        CMK_ERRNO_TEXTS(ERRNO_CASE)
    default:
        s_addf(s, "errno %d", e);
    }
#undef ERRNO_CASE
}

/* Opens name (below dirfd, or AT_FDCWD) without following a final symlink and without blocking on a
 * FIFO, and keeps it only if it is a regular file (cgroup, proc and sysfs files all are). flags: O_RDONLY,
 * or O_WRONLY (checked before it is opened, so a FIFO or device is never opened for writing).
 * Returns the fd, or minus (an errno, E_NOT_REGULAR or E_SYMLINK). */
static int open_regular(int dirfd, const char *name, int flags)
{
    struct stat st;
    if (flags != O_RDONLY) {
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW))
            return -errno;
        if (S_ISLNK(st.st_mode))
            return -E_SYMLINK;
        if (!S_ISREG(st.st_mode))
            return -E_NOT_REGULAR;
    }
    int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return errno == ELOOP ? -E_SYMLINK : -errno;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return -E_NOT_REGULAR;
    }
    return fd;
}

static str msg;
static const char *prog = PROG; /* the running subcommand's name, for messages */

/* Write all of p (retrying short writes and EINTR); 0, or -1 with errno set. */
static int write_all(int fd, const char *p, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, p + done, len - done);
        if (n <= 0 && errno != EINTR)
            return -1;
        if (n > 0)
            done += (size_t)n;
    }
    return 0;
}

/* Print "PROG: error: <msg>\n" as one write and return the status. */
static int fail_as(const char *prog, int status)
{
    str line = {0};
    s_add(&line, prog);
    s_add(&line, ": error: ");
    s_addn(&line, msg.p ? msg.p : "", msg.len);
    s_add(&line, "\n");
    (void)write_all(2, line.p, line.len); /* nowhere left to report a failed stderr */
    return status;
}

static int fail(int status)
{
    return fail_as(prog, status);
}

static int usage(void)
{
    s_add(&msg, " (see '" PROG " --help')");
    return fail(EXIT_USAGE);
}

/* ---- isolate: the command line ------------------------------------------- */

struct pool {
    const char *name, *var, *resource;
    int socket_aware;
};

#define POOL_ENTRY(name, var, resource, socket_aware) {name, var, resource, socket_aware},
static const struct pool POOLS[] = {CMK_POOLS(POOL_ENTRY)};
#undef POOL_ENTRY

struct request {
    const char *pool;
    long socket_id;
    int no_affinity, help;
    const char *command;
    char **args;
    int nargs;
};

static void after_command_hint(const struct request *r)
{
    if (r->command)
        s_add(&msg, " (the command's arguments go after '--')");
}

static int is_digits(const char *t, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (t[i] < '0' || t[i] > '9')
            return 0;
    return 1;
}

/* Returns 0, or the status to exit with once msg is printed (see parse_args in isolate.py). */
static int parse_args(int argc, char **argv, struct request *r)
{
    int i = 0;
    memset(r, 0, sizeof *r);
    r->socket_id = -1;
    while (i < argc) {
        const char *t = argv[i++];
        if (!strcmp(t, "--")) {
            if (!r->command) {
                if (i >= argc)
                    break;
                r->command = argv[i++];
            }
            r->args = argv + i;
            r->nargs = argc - i;
            break;
        }
        if (!strcmp(t, "-h") || !strcmp(t, "--help")) {
            r->help = 1;
            return 0;
        }
        if (!strncmp(t, "--", 2)) {
            const char *eq = strchr(t, '=');
            size_t nlen = eq ? (size_t)(eq - t) : strlen(t);
            const char *value = eq ? eq + 1 : NULL;
#define IS(name) (nlen == sizeof(name) - 1 && !strncmp(t, name, nlen))
            if (IS("--no-affinity")) {
                if (eq) {
                    s_add(&msg, "option --no-affinity takes no value");
                    return usage();
                }
                r->no_affinity = 1;
                continue;
            }
            int which = IS("--pool") ? 1 : IS("--socket-id") ? 2 : IS("--namespace") ? 3 : 0;
#undef IS
            if (!which) {
                s_add(&msg, "unknown option '");
                s_shown_n(&msg, t, nlen);
                s_add(&msg, "'");
                after_command_hint(r);
                return usage();
            }
            if (!value) {
                if (i >= argc) {
                    s_add(&msg, "option ");
                    s_addn(&msg, t, nlen);
                    s_add(&msg, " needs a value");
                    return usage();
                }
                value = argv[i++];
            }
            if (which == 1) {
                r->pool = value;
            } else if (which == 2) {
                size_t n = strlen(value);
                if (!strcmp(value, "-1")) {
                    r->socket_id = -1;
                } else if (n <= 9 && is_digits(value, n)) {
                    r->socket_id = strtol(value, NULL, 10);
                } else {
                    s_add(&msg, "--socket-id must be a socket number or -1 for any socket, not '");
                    s_shown(&msg, value);
                    s_add(&msg, "'");
                    return usage();
                }
            }
            continue;
        }
        if (t[0] == '-' && t[1]) {
            s_add(&msg, "unknown option '");
            s_shown(&msg, t);
            s_add(&msg, "'");
            after_command_hint(r);
            return usage();
        }
        if (r->command) {
            s_add(&msg, "unexpected argument '");
            s_shown(&msg, t);
            s_add(&msg, "' after COMMAND '");
            s_shown(&msg, r->command);
            s_add(&msg, "'");
            after_command_hint(r);
            return usage();
        }
        r->command = t;
    }
    if (!r->pool) {
        s_add(&msg, "missing --pool=POOL (one of: " POOL_NAMES ")");
        return usage();
    }
    if (!r->command || !*r->command) {
        s_add(&msg, "missing COMMAND to run");
        return usage();
    }
    return 0;
}

/* ---- isolate: the pool's CPUs -------------------------------------------- */

/* Wraps the detail in msg as pool_cpus does in isolate.py; returns -1 (the caller picks the status). */
static int malformed(const char *var, const char *raw)
{
    str detail = msg;
    msg = (str){0};
    s_add(&msg, var);
    s_add(&msg, "='");
    s_shown(&msg, raw);
    s_add(&msg, "' is not a cpu list: ");
    s_addn(&msg, detail.p, detail.len);
    s_add(&msg, " (" LIST_HINT ")");
    free(detail.p);
    return -1;
}

/* Parses one CPU number of [t, t+n); 0, or -1 with the message in msg. */
static int cpu_number(const char *var, const char *raw, const char *t, size_t n, unsigned *out)
{
    if (n > 9 || !is_digits(t, n)) {
        s_add(&msg, "'");
        s_shown_n(&msg, t, n);
        s_add(&msg, "' is not a CPU number");
        return malformed(var, raw);
    }
    unsigned long v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned long)(t[i] - '0');
    if (v >= MAX_CPUS) {
        s_addf(&msg, "CPU %lu is out of range (0-%d)", v, MAX_CPUS - 1);
        return malformed(var, raw);
    }
    *out = (unsigned)v;
    return 0;
}

/* Parses a CMK_CPUS_* value into cpus; 0, or -1 with the message in msg. */
static int parse_env_cpus(const char *var, const char *raw, cpuset *cpus)
{
    const char *entry = raw;
    for (;;) {
        const char *comma = strchr(entry, ',');
        size_t n = comma ? (size_t)(comma - entry) : strlen(entry);
        if (n == 0) {
            s_add(&msg, "empty entry between commas");
            return malformed(var, raw);
        }
        const char *dash = memchr(entry, '-', n);
        size_t first_len = dash ? (size_t)(dash - entry) : n;
        unsigned low, high;
        int status = cpu_number(var, raw, entry, first_len, &low);
        if (status)
            return status;
        high = low;
        if (dash && (status = cpu_number(var, raw, dash + 1, n - first_len - 1, &high)))
            return status;
        if (high < low) {
            s_add(&msg, "range '");
            s_shown_n(&msg, entry, n);
            s_add(&msg, "' runs backwards");
            return malformed(var, raw);
        }
        for (unsigned c = low; c <= high; c++)
            cs_add(cpus, c);
        if (!comma)
            return 0;
        entry = comma + 1;
    }
}

static int pool_cpus(const char *name, const struct pool **pool, cpuset *cpus)
{
    const struct pool *p = NULL;
    for (size_t i = 0; i < sizeof POOLS / sizeof POOLS[0]; i++)
        if (!strcmp(POOLS[i].name, name))
            p = &POOLS[i];
    if (!p) {
        s_add(&msg, "unknown pool '");
        s_shown(&msg, name);
        s_add(&msg, "': choose one of " POOL_NAMES);
        return fail(EXIT_UNKNOWN_POOL);
    }
    *pool = p;
    const char *raw = getenv(p->var);
    if (!raw || !*raw) {
        s_add(&msg, "this container holds no ");
        s_add(&msg, p->name);
        s_add(&msg, " CPUs (");
        s_add(&msg, p->var);
        s_add(&msg, raw ? " is empty" : " is not set");
        s_add(&msg, "): request ");
        s_add(&msg, p->resource);
        s_add(&msg, " in resources.limits");
        return fail(EXIT_NO_CPUS);
    }
    return parse_env_cpus(p->var, raw, cpus) ? fail(EXIT_MALFORMED) : 0;
}

static int check_allowed(const struct pool *p, const cpuset *cpus, const cpuset *allowed)
{
    cpuset missing = {0};
    int count = 0;
    for (unsigned c = 0; c < MAX_CPUS; c++)
        if (cs_has(cpus, c) && !cs_has(allowed, c)) {
            cs_add(&missing, c);
            count++;
        }
    if (!count)
        return 0;
    s_add(&msg, count == 1 ? "CPU " : "CPUs ");
    s_ranges(&msg, &missing);
    s_add(&msg, " of the ");
    s_add(&msg, p->name);
    s_add(&msg, count == 1 ? " pool is" : " pool are");
    s_add(&msg, " not allowed in this container (allowed: ");
    s_ranges(&msg, allowed);
    s_add(&msg, ")");
    return fail(EXIT_NOT_ALLOWED);
}

/* ---- isolate: affinity ----------------------------------------------------
 *
 * The CPUs a container may use are its cpuset's, not the affinity it started
 * with (read pinner/isolate.py: since Linux 6.2 that may still be the
 * runtime's). The kernel intersects every request with the cpuset, so asking
 * for all CPUs and reading back yields the cpuset.
 */

/* `what` and the errno as one message: the caller's `return fail(...)`. */
static int affinity_error(const char *what, const cpuset *cpus, int e)
{
    s_add(&msg, what);
    if (cpus)
        s_ranges(&msg, cpus);
    s_add(&msg, ": ");
    s_errno(&msg, e);
    return fail(EXIT_AFFINITY);
}

static int get_affinity(cpuset *out)
{
    memset(out, 0, sizeof *out); /* the kernel writes only its own mask size */
    return syscall(SYS_sched_getaffinity, 0, sizeof *out, out) < 0 ? -1 : 0;
}

static int set_affinity(const cpuset *cpus)
{
    return syscall(SYS_sched_setaffinity, 0, sizeof *cpus, cpus) < 0 ? -1 : 0;
}

/* *allowed: the cpuset's CPUs, which this process is left on; *started: the affinity it came with.
 * If the kernel refuses to widen it (a seccomp filter, say), the affinity held is the best answer. */
static int cpuset_cpus(cpuset *allowed, cpuset *started)
{
    static cpuset all;
    if (get_affinity(started))
        return affinity_error("cannot read this process's allowed CPUs", NULL, errno);
    memset(&all, 0xff, sizeof all);
    if (set_affinity(&all)) {
        *allowed = *started;
        return 0;
    }
    if (get_affinity(allowed))
        return affinity_error("cannot read this process's allowed CPUs", NULL, errno);
    return 0;
}

/* Pin, then read back: a pin the kernel narrowed or moved (the cpuset changed under us) is refused. */
static int pin(const cpuset *cpus)
{
    static cpuset got;
    if (set_affinity(cpus) || get_affinity(&got))
        return affinity_error("cannot pin to CPUs ", cpus, errno);
    if (!memcmp(&got, cpus, sizeof got))
        return 0;
    s_add(&msg, "cannot pin to CPUs ");
    s_ranges(&msg, cpus);
    s_add(&msg, ": the kernel set CPUs ");
    s_ranges(&msg, &got);
    s_add(&msg, " (did the container's cpuset change?)");
    return fail(EXIT_AFFINITY);
}

/* ---- isolate: --socket-id ------------------------------------------------ */

static int parse_kernel_list(const char *text, cpuset *set);

/* Wraps the detail in msg: "cannot read WHAT from PATH: DETAIL (hint)", status 7. */
static int sysfs_error(const char *what, const char *path)
{
    str detail = msg;
    msg = (str){0};
    s_add(&msg, "cannot read ");
    s_add(&msg, what);
    s_add(&msg, " from ");
    s_shown(&msg, path);
    s_add(&msg, ": ");
    s_addn(&msg, detail.p, detail.len);
    s_add(&msg, " (--socket-id needs sysfs; use --socket-id=-1 for any socket)");
    free(detail.p);
    return fail(EXIT_SOCKET);
}

static int socket_read_error(unsigned cpu, const char *path)
{
    char what[40];
    snprintf(what, sizeof what, "the socket of CPU %u", cpu);
    return sysfs_error(what, path);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Reads at most limit bytes of the regular file path into out, then drops NULs and surrounding
 * whitespace (as the daemon reads sysfs); *raw_len is the length read. 0, or an errno / E_NOT_REGULAR /
 * E_SYMLINK. */
static int read_sysfs(const char *path, size_t limit, str *out, size_t *raw_len)
{
    int fd = open_regular(AT_FDCWD, path, O_RDONLY);
    if (fd < 0)
        return -fd;
    s_reserve(out, limit);
    while (out->len < limit) {
        ssize_t n = read(fd, out->p + out->len, limit - out->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            return e;
        }
        if (n == 0)
            break;
        out->len += (size_t)n;
    }
    close(fd);
    *raw_len = out->len;
    size_t kept = 0;
    for (size_t i = 0; i < out->len; i++)
        if (out->p[i])
            out->p[kept++] = out->p[i];
    char *t = out->p, *end = out->p + kept;
    while (t < end && is_space(*t))
        t++;
    while (end > t && is_space(end[-1]))
        end--;
    out->len = (size_t)(end - t);
    memmove(out->p, t, out->len);
    out->p[out->len] = '\0';
    return 0;
}

/* Reads a sysfs file of at most limit bytes into text; 0, 1 when missing_ok and it is not there, or the
 * error status with the message in msg. */
static int read_sysfs_text(const char *what, const char *path, size_t limit, int missing_ok, str *text)
{
    size_t raw_len = 0;
    int e = read_sysfs(path, limit + 1, text, &raw_len);
    if (e && missing_ok && (e == ENOENT || e == ENOTDIR))
        return 1;
    if (e) {
        s_errno(&msg, e);
        return sysfs_error(what, path);
    }
    if (raw_len > limit) {
        s_addf(&msg, "longer than %zu bytes", limit);
        return sysfs_error(what, path);
    }
    return 0;
}

/* A physical_package_id's text; -1 (any negative) means the kernel does not know it. */
static int parse_package(const char *what, const char *path, const char *t, long *package)
{
    const char *digits = *t == '-' ? t + 1 : t;
    size_t n = strlen(digits);
    if (n > 9 || !is_digits(digits, n)) {
        s_add(&msg, "'");
        s_shown(&msg, t);
        s_add(&msg, "' is not a number");
        return sysfs_error(what, path);
    }
    *package = strtol(t, NULL, 10);
    if (*package < -1)
        *package = -1;
    return 0;
}

static void topology_path(str *path, const char *root, unsigned cpu, const char *name)
{
    path->len = 0;
    s_add(path, root);
    s_addf(path, "/devices/system/cpu/cpu%u/topology/%s", cpu, name);
}

static int read_package(const char *root, unsigned cpu, long *package)
{
    str path = {0}, text = {0};
    size_t raw_len = 0;
    char what[40];
    snprintf(what, sizeof what, "the socket of CPU %u", cpu);
    topology_path(&path, root, cpu, "physical_package_id");
    int e = read_sysfs(path.p, MAX_NUMBER_FILE_BYTES, &text, &raw_len);
    if (e) {
        s_errno(&msg, e);
        return sysfs_error(what, path.p);
    }
    int status = parse_package(what, path.p, text.p, package);
    free(path.p);
    free(text.p);
    return status;
}

/* A cleaned sysfs cpu list (0-3,8), or with mask a hex mask (0000ff0f,00000000), into set. */
static int parse_sysfs_cpus(const char *what, const char *path, const char *text, int mask, cpuset *set)
{
    memset(set, 0, sizeof *set);
    if (!*text)
        return 0;
    if (!mask) {
        if (!parse_kernel_list(text, set))
            return 0;
        s_add(&msg, "'");
        s_shown(&msg, text);
        s_add(&msg, "' is not a cpu list");
        return sysfs_error(what, path);
    }
    unsigned bit = 0, digits = 0;
    int bad = 0;
    for (size_t i = strlen(text); i-- > 0 && !bad;) {
        char c = text[i];
        if (c == ',')
            continue;
        unsigned v = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16;
        bad = v == 16 || (v && bit >= MAX_CPUS);
        for (unsigned b = 0; b < 4 && !bad; b++)
            if (v >> b & 1)
                cs_add(set, bit + b);
        bit += 4;
        digits++;
    }
    if (!bad && digits)
        return 0;
    s_add(&msg, "'");
    s_shown(&msg, text);
    s_add(&msg, "' is not a cpu mask");
    return sysfs_error(what, path);
}

static int is_dir(const char *path)
{
    struct stat st;
    return !stat(path, &st) && S_ISDIR(st.st_mode);
}

/* The online CPUs, as the daemon finds them: cpu/online, else each cpuN/online flag, else every cpuN
 * with a topology folder (old kernels and machine dumps have no online file). */
static int online_cpus(const char *root, cpuset *online)
{
    static const char what[] = "the online CPUs";
    str dir = {0}, path = {0}, text = {0};
    s_add(&dir, root);
    s_add(&dir, "/devices/system/cpu");
    s_addf(&path, "%s/online", dir.p);
    int status = read_sysfs_text(what, path.p, MAX_LIST_FILE_BYTES, 1, &text);
    if (status > 1 || (status == 0 && (status = parse_sysfs_cpus(what, path.p, text.p, 0, online))))
        return status;
    for (unsigned w = 0; w < MASK_WORDS; w++)
        if (online->w[w])
            return 0;
    DIR *d = opendir(dir.p);
    if (!d) {
        s_errno(&msg, errno);
        return sysfs_error(what, dir.p);
    }
    for (struct dirent *entry; (entry = readdir(d));) {
        const char *digits = entry->d_name + 3;
        size_t n = strlen(digits);
        if (strncmp(entry->d_name, "cpu", 3) || !n || n > 9 || !is_digits(digits, n))
            continue;
        unsigned long cpu = strtoul(digits, NULL, 10);
        path.len = 0;
        s_addf(&path, "%s/%s", dir.p, entry->d_name);
        if (cpu >= MAX_CPUS || !is_dir(path.p))
            continue;
        s_add(&path, "/online");
        text.len = 0;
        if ((status = read_sysfs_text(what, path.p, MAX_NUMBER_FILE_BYTES, 1, &text)) > 1) {
            closedir(d);
            return status;
        }
        int flag = status == 0 && text.len;
        if (flag && strcmp(text.p, "0") && strcmp(text.p, "1")) {
            s_add(&msg, "'");
            s_shown(&msg, text.p);
            s_add(&msg, "' is not 0 or 1");
            closedir(d);
            return sysfs_error(what, path.p);
        }
        path.len -= strlen("/online");
        s_add(&path, "/topology");
        if (flag ? text.p[0] == '1' : is_dir(path.p))
            cs_add(online, (unsigned)cpu);
    }
    closedir(d);
    free(dir.p);
    free(path.p);
    free(text.p);
    return 0;
}

/* One package the kernel gave no id, as pinner/packages.py's number_packages keys it. */
struct package_group {
    cpuset members;
    unsigned long hash;
    long number;
};

static unsigned long cs_hash(const cpuset *s)
{
    unsigned long h = 1469598103934665603UL;
    for (unsigned w = 0; w < MASK_WORDS; w++)
        h = (h ^ s->w[w]) * 1099511628211UL;
    return h;
}

static const char *const PACKAGE_LIST_FILES[] = {
#define PACKAGE_FILE(name) name,
    CMK_PACKAGE_LIST_FILES(PACKAGE_FILE)
#undef PACKAGE_FILE
};

/* derived[cpu]: every online CPU's package number where the kernel gives -1 (else -1), numbered as
 * pinner/packages.py's number_packages does: a package one of its CPUs has an id for keeps the lowest
 * such id; the others are numbered after the known ids, in the order of their lowest CPU. */
static int derived_packages(const char *root, long *derived)
{
    static cpuset online, members;
    static long known[MAX_CPUS];
    struct package_group *groups = NULL;
    size_t ngroups = 0, cap = 0;
    str path = {0}, text = {0};
    char what[40];
    long next_id = 0;
    int status = online_cpus(root, &online);
    if (status)
        return status;
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        known[c] = derived[c] = -1;
        if (!cs_has(&online, c))
            continue;
        snprintf(what, sizeof what, "the socket of CPU %u", c);
        topology_path(&path, root, c, "physical_package_id");
        text.len = 0;
        if ((status = read_sysfs_text(what, path.p, MAX_NUMBER_FILE_BYTES, 1, &text)) > 1 ||
            (status == 0 && (status = parse_package(what, path.p, text.p, &known[c]))))
            return status;
        if (known[c] >= next_id)
            next_id = known[c] + 1;
    }
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        if (!cs_has(&online, c) || known[c] >= 0)
            continue;
        snprintf(what, sizeof what, "the socket of CPU %u", c);
        status = 1;
        for (size_t f = 0; f < sizeof PACKAGE_LIST_FILES / sizeof PACKAGE_LIST_FILES[0] && status == 1; f++) {
            topology_path(&path, root, c, PACKAGE_LIST_FILES[f]);
            text.len = 0;
            if ((status = read_sysfs_text(what, path.p, MAX_LIST_FILE_BYTES, 1, &text)) > 1 ||
                (status == 0 && (status = parse_sysfs_cpus(what, path.p, text.p,
                                                           !strstr(PACKAGE_LIST_FILES[f], "_list"), &members))))
                return status;
        }
        int listed = 0;
        for (unsigned w = 0; w < MASK_WORDS && !listed; w++)
            listed = members.w[w] != 0;
        if (status == 1 || !listed)
            continue;
        cs_add(&members, c);
        unsigned long hash = cs_hash(&members);
        size_t g = 0;
        while (g < ngroups && (groups[g].hash != hash || memcmp(&groups[g].members, &members, sizeof members)))
            g++;
        if (g == ngroups) {
            if (ngroups == cap) {
                cap = cap ? 2 * cap : 16;
                if (!(groups = realloc(groups, cap * sizeof *groups)))
                    out_of_memory();
            }
            long named = -1;
            for (unsigned m = 0; m < MAX_CPUS; m++)
                if (cs_has(&members, m) && known[m] >= 0 && (named < 0 || known[m] < named))
                    named = known[m];
            groups[g] = (struct package_group){members, hash, named >= 0 ? named : next_id++};
            ngroups++;
        }
        derived[c] = groups[g].number;
    }
    free(groups);
    free(path.p);
    free(text.p);
    return 0;
}

static int on_socket(const struct pool *p, cpuset *cpus, long socket_id, const char *root)
{
    long packages[64];
    size_t npackages = 0;
    cpuset kept = {0};
    int any = 0;
    static long ids[MAX_CPUS], derived[MAX_CPUS];
    int unknown = 0;
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        int status = cs_has(cpus, c) ? read_package(root, c, &ids[c]) : 0;
        if (status)
            return status;
        unknown |= cs_has(cpus, c) && ids[c] == -1;
    }
    int status = unknown ? derived_packages(root, derived) : 0;
    if (status)
        return status;
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        if (!cs_has(cpus, c))
            continue;
        long package = ids[c] == -1 ? derived[c] : ids[c];
        if (package == -1) {
            str path = {0};
            topology_path(&path, root, c, "physical_package_id");
            s_add(&msg, UNKNOWN_PACKAGE_TEXT);
            return socket_read_error(c, path.p);
        }
        if (package == socket_id) {
            cs_add(&kept, c);
            any = 1;
        }
        size_t i = 0; /* keep the distinct packages sorted, for the message */
        while (i < npackages && packages[i] < package)
            i++;
        if ((i == npackages || packages[i] != package) && npackages < sizeof packages / sizeof packages[0]) {
            memmove(packages + i + 1, packages + i, (npackages - i) * sizeof packages[0]);
            packages[i] = package;
            npackages++;
        }
    }
    if (!any) {
        s_add(&msg, "none of the ");
        s_add(&msg, p->name);
        s_add(&msg, " pool's CPUs (");
        s_ranges(&msg, cpus);
        s_addf(&msg, ") is on socket %ld (they are on socket ", socket_id);
        for (size_t i = 0; i < npackages; i++)
            s_addf(&msg, i ? ",%ld" : "%ld", packages[i]);
        s_add(&msg, "): use one of those with --socket-id, or -1 for any");
        return fail(EXIT_SOCKET);
    }
    *cpus = kept;
    return 0;
}

/* ---- isolate: affinity, env, exec ---------------------------------------- */

static void set_assigned_env(const cpuset *cpus)
{
    str csv = {0}, mask = {0};
    int top = MASK_WORDS - 1;
    for (unsigned c = 0; c < MAX_CPUS; c++)
        if (cs_has(cpus, c))
            s_addf(&csv, csv.len ? ",%u" : "%u", c);
    while (top > 0 && !cpus->w[top])
        top--;
    s_addf(&mask, "%lX", cpus->w[top]); /* CMK's form: upper-case hex, no 0x */
    for (int i = top - 1; i >= 0; i--)
        s_addf(&mask, "%0*lX", (int)(WORD_BITS / 4), cpus->w[i]);
    if (setenv(ENV_ASSIGNED, csv.p, 1) || setenv(ENV_ASSIGNED_MASK, mask.p, 1))
        out_of_memory();
    free(csv.p);
    free(mask.p);
}

/* Searches PATH as Python's os.execvp does (and without glibc's /bin/sh fallback). */
static int exec_command(const char *command, char **args, int nargs)
{
    char **argv = calloc((size_t)nargs + 2, sizeof *argv);
    if (!argv)
        out_of_memory();
    argv[0] = (char *)command;
    for (int i = 0; i < nargs; i++)
        argv[i + 1] = args[i];
    int first_other = 0, last = 0;
    const char *where = NULL;
    if (strchr(command, '/')) {
        execv(command, argv);
        last = errno;
        if (last != ENOENT && last != ENOTDIR)
            first_other = last;
    } else {
        const char *path = getenv("PATH");
        where = path ? path : DEFAULT_PATH;
        for (const char *dir = where;;) {
            const char *colon = strchr(dir, ':');
            size_t n = colon ? (size_t)(colon - dir) : strlen(dir);
            str candidate = {0};
            if (n) {
                s_addn(&candidate, dir, n);
                s_add(&candidate, "/");
            }
            s_add(&candidate, command);
            execv(candidate.p, argv);
            last = errno;
            if (last != ENOENT && last != ENOTDIR && !first_other)
                first_other = last;
            free(candidate.p);
            if (!colon)
                break;
            dir = colon + 1;
        }
    }
    int e = first_other ? first_other : last;
    s_shown(&msg, command);
    if (e == ENOENT || e == ENOTDIR) {
        if (where) {
            s_add(&msg, ": command not found (searched PATH=");
            s_shown(&msg, where);
            s_add(&msg, ")");
        } else {
            s_add(&msg, ": ");
            s_errno(&msg, e);
        }
        return fail(EXIT_NOT_FOUND);
    }
    s_add(&msg, ": cannot execute: ");
    s_errno(&msg, e);
    return fail(EXIT_NOT_EXECUTABLE);
}

static int isolate(int argc, char **argv)
{
    struct request r;
    const struct pool *pool = NULL;
    static cpuset cpus, allowed, started;
    int status = parse_args(argc, argv, &r);
    if (status)
        return status;
    if (r.help)
        return write_all(1, HELP, sizeof HELP - 1) ? 1 : EXIT_HELP;
    if ((status = pool_cpus(r.pool, &pool, &cpus)) || (status = cpuset_cpus(&allowed, &started)) ||
        (status = check_allowed(pool, &cpus, &allowed)))
        return status;
    if (r.socket_id != -1 && pool->socket_aware) {
        const char *root = getenv(ENV_SYSFS_ROOT);
        if ((status = on_socket(pool, &cpus, r.socket_id, root && *root ? root : DEFAULT_SYSFS_ROOT)))
            return status;
    }
    if (!r.no_affinity) {
        if ((status = pin(&cpus)))
            return status;
    } else if (memcmp(&allowed, &started, sizeof allowed) && set_affinity(&started)) {
        /* the workload pins itself: give back the affinity it came with */
        return affinity_error("cannot restore this process's CPUs ", &started, errno);
    }
    set_assigned_env(&cpus);
    return exec_command(r.command, r.args, r.nargs);
}

/* ---- hook: input ------------------------------------------------------------
 *
 * `cmk hook` is the OCI createRuntime hook the CDI spec adds (read
 * pinner/hook.py's docstring for why that stage, and the exit statuses).
 * Its input is JSON written by Go runtimes; it needs a few fields, but parses
 * the whole document strictly so a truncated or corrupt one is refused with
 * the byte where it broke, never half-read.
 */

/* Reads all of fd (up to HOOK_MAX_JSON_BYTES); 0, or an errno (EFBIG when too big). */
static int read_all(int fd, str *out)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        if (n == 0)
            break;
        if (out->len + (size_t)n > HOOK_MAX_JSON_BYTES)
            return EFBIG;
        s_addn(out, buf, (size_t)n);
    }
    if (!out->p)
        s_addn(out, "", 0);
    return 0;
}

#define STR_(x) #x
#define STR(x) STR_(x)

enum jtype { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT };

struct jmember;

/* A parsed JSON value. Strings are decoded (UTF-8, may hold NULs: see len); numbers keep their text. */
typedef struct jval {
    enum jtype type;
    char *text;
    size_t len;
    struct jval *items; /* J_ARRAY */
    struct jmember *members; /* J_OBJECT */
    size_t count;
} jval;

struct jmember {
    char *key;
    size_t key_len;
    jval value;
};

struct jparser {
    const char *start, *p, *end;
    const char *error; /* what is wrong, for the message */
    int depth;
};

static const char *const JTYPE_NAMES[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};

static int j_fail(struct jparser *jp, const char *what)
{
    jp->error = what;
    return -1;
}

static void j_space(struct jparser *jp)
{
    while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r'))
        jp->p++;
}

static void utf8_put(str *s, unsigned long cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    s_addn(s, b, n);
}

static int j_hex4(struct jparser *jp, unsigned long *out)
{
    unsigned long v = 0;
    if (jp->end - jp->p < 4)
        return j_fail(jp, "expected four hex digits after \\u");
    for (int i = 0; i < 4; i++) {
        char c = *jp->p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return j_fail(jp, "expected four hex digits after \\u");
        v = v * 16 + (unsigned long)d;
        jp->p++;
    }
    *out = v;
    return 0;
}

/* A string at jp->p (the opening quote); lone surrogates become U+FFFD, as Go's decoder does. */
static int j_string(struct jparser *jp, char **text, size_t *len)
{
    str s = {0};
    jp->p++;
    for (;;) {
        if (jp->p >= jp->end)
            return j_fail(jp, "expected a closing '\"'");
        unsigned char c = (unsigned char)*jp->p;
        if (c == '"') {
            jp->p++;
            break;
        }
        if (c < 0x20)
            return j_fail(jp, "a raw control character inside a string");
        if (c != '\\') {
            s_addn(&s, jp->p++, 1);
            continue;
        }
        jp->p++;
        if (jp->p >= jp->end)
            return j_fail(jp, "expected an escape after '\\'");
        char e = *jp->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char decoded[] = "\"\\/\b\f\n\r\t";
            s_addn(&s, &decoded[simple - "\"\\/bfnrt"], 1);
            continue;
        }
        if (e != 'u') {
            jp->p--;
            return j_fail(jp, "expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX");
        }
        unsigned long cp;
        if (j_hex4(jp, &cp))
            return -1;
        if (cp >= 0xd800 && cp < 0xdc00 && jp->end - jp->p >= 6 && jp->p[0] == '\\' && jp->p[1] == 'u') {
            const char *back = jp->p;
            unsigned long low;
            jp->p += 2;
            if (j_hex4(jp, &low))
                return -1;
            if (low >= 0xdc00 && low < 0xe000)
                cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            else
                jp->p = back; /* not a pair: decode the next escape on its own */
        }
        if (cp >= 0xd800 && cp < 0xe000)
            cp = 0xfffd;
        utf8_put(&s, cp);
    }
    if (!s.p)
        s_addn(&s, "", 0);
    *text = s.p;
    *len = s.len;
    return 0;
}

static int j_digits(struct jparser *jp)
{
    const char *from = jp->p;
    while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
        jp->p++;
    return jp->p > from;
}

static int j_number(struct jparser *jp, jval *v)
{
    const char *from = jp->p;
    if (*jp->p == '-')
        jp->p++;
    if (jp->p < jp->end && *jp->p == '0')
        jp->p++;
    else if (!j_digits(jp))
        return j_fail(jp, "expected a digit");
    if (jp->p < jp->end && *jp->p == '.') {
        jp->p++;
        if (!j_digits(jp))
            return j_fail(jp, "expected a digit after '.'");
    }
    if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
        jp->p++;
        if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-'))
            jp->p++;
        if (!j_digits(jp))
            return j_fail(jp, "expected a digit in the exponent");
    }
    str s = {0};
    s_addn(&s, from, (size_t)(jp->p - from));
    v->type = J_NUMBER;
    v->text = s.p;
    v->len = s.len;
    return 0;
}

static int j_value(struct jparser *jp, jval *v);

static int j_container(struct jparser *jp, jval *v, char close)
{
    size_t cap = 0;
    if (++jp->depth > HOOK_MAX_JSON_DEPTH)
        return j_fail(jp, "nesting deeper than " STR(HOOK_MAX_JSON_DEPTH) " levels");
    v->type = close == '}' ? J_OBJECT : J_ARRAY;
    jp->p++;
    j_space(jp);
    if (jp->p < jp->end && *jp->p == close) {
        jp->p++;
        jp->depth--;
        return 0;
    }
    for (;;) {
        if (v->count == cap) {
            cap = cap ? cap * 2 : 8;
            void *grown = close == '}' ? realloc(v->members, cap * sizeof *v->members)
                                       : realloc(v->items, cap * sizeof *v->items);
            if (!grown)
                out_of_memory();
            if (close == '}')
                v->members = grown;
            else
                v->items = grown;
        }
        jval *slot;
        j_space(jp);
        if (close == '}') {
            struct jmember *m = &v->members[v->count];
            memset(m, 0, sizeof *m);
            if (jp->p >= jp->end || *jp->p != '"')
                return j_fail(jp, "expected a '\"' starting a member name");
            if (j_string(jp, &m->key, &m->key_len))
                return -1;
            j_space(jp);
            if (jp->p >= jp->end || *jp->p != ':')
                return j_fail(jp, "expected ':' after a member name");
            jp->p++;
            slot = &m->value;
        } else {
            slot = &v->items[v->count];
            memset(slot, 0, sizeof *slot);
        }
        if (j_value(jp, slot))
            return -1;
        v->count++;
        j_space(jp);
        if (jp->p < jp->end && *jp->p == ',') {
            jp->p++;
            continue;
        }
        if (jp->p < jp->end && *jp->p == close) {
            jp->p++;
            jp->depth--;
            return 0;
        }
        return j_fail(jp, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int j_word(struct jparser *jp, const char *word, jval *v, enum jtype type)
{
    size_t n = strlen(word);
    if ((size_t)(jp->end - jp->p) < n || memcmp(jp->p, word, n))
        return j_fail(jp, "expected a JSON value");
    v->type = type;
    v->text = (char *)word;
    v->len = n;
    jp->p += n;
    return 0;
}

static int j_value(struct jparser *jp, jval *v)
{
    j_space(jp);
    if (jp->p >= jp->end)
        return j_fail(jp, "expected a JSON value");
    switch (*jp->p) {
    case '{':
        return j_container(jp, v, '}');
    case '[':
        return j_container(jp, v, ']');
    case '"':
        v->type = J_STRING;
        return j_string(jp, &v->text, &v->len);
    case 't':
        return j_word(jp, "true", v, J_BOOL);
    case 'f':
        return j_word(jp, "false", v, J_BOOL);
    case 'n':
        return j_word(jp, "null", v, J_NULL);
    default:
        if (*jp->p == '-' || (*jp->p >= '0' && *jp->p <= '9'))
            return j_number(jp, v);
        return j_fail(jp, "expected a JSON value");
    }
}

/* Parses the whole of text; on error msg says "<what> is not valid JSON: expected X at byte N". */
static int j_parse(const str *text, const char *what, jval *out)
{
    struct jparser jp = {text->p, text->p, text->p + text->len, NULL, 0};
    memset(out, 0, sizeof *out);
    if (!j_value(&jp, out)) {
        j_space(&jp);
        if (jp.p == jp.end)
            return 0;
        jp.error = "expected the end of the input after the value";
    }
    s_add(&msg, what);
    s_add(&msg, " is not valid JSON: ");
    s_add(&msg, jp.error);
    if (jp.p >= jp.end)
        s_add(&msg, " at its end");
    else
        s_addf(&msg, " at byte %zu", (size_t)(jp.p - jp.start));
    if (text->len == 0)
        s_add(&msg, " (it is empty)");
    return -1;
}

/* The member named key (the last one, as Go's decoder keeps), or NULL. */
static const jval *j_get(const jval *obj, const char *key)
{
    const jval *found = NULL;
    size_t n = strlen(key);
    if (obj->type != J_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (obj->members[i].key_len == n && !memcmp(obj->members[i].key, key, n))
            found = &obj->members[i].value;
    return found;
}

/* ---- hook: the container's CPUs ---------------------------------------------
 *
 * The CPUs come only from OCI hooks: this hook's own --cpus, and the --cpus of
 * every `cmk hook` entry in config.json's hooks.createRuntime (one per CDI device
 * the container holds). A pod spec can set env, never a hook; the env is not read.
 */

struct hook_opts {
    const char *proc_root, *cgroup_root, *cpus, *node_wide;
    int help, exclusive;
};

/* Parses cmk hook's options (argv after "hook", or a config entry's args after "cmk hook");
 * 0, or -1 with the problem in msg; `unknown_hint` follows an unknown option or argument. */
static int parse_hook_opts(size_t argc, char *const *argv, struct hook_opts *o, const char *unknown_hint)
{
    for (size_t i = 0; i < argc; i++) {
        const char *t = argv[i];
        if (!strcmp(t, "-h") || !strcmp(t, "--help")) {
            o->help = 1;
            return 0;
        }
        if (!strcmp(t, HOOK_EXCLUSIVE_OPTION)) {
            if (o->exclusive) {
                s_add(&msg, "option " HOOK_EXCLUSIVE_OPTION " is given twice");
                return -1;
            }
            o->exclusive = 1;
            continue;
        }
        const char *eq = strchr(t, '=');
        size_t nlen = eq ? (size_t)(eq - t) : strlen(t);
        const char **target = nlen == 11 && !strncmp(t, "--proc-root", 11)     ? &o->proc_root
                              : nlen == 13 && !strncmp(t, "--cgroup-root", 13) ? &o->cgroup_root
                              : nlen == sizeof HOOK_CPUS_OPTION - 1 && !strncmp(t, HOOK_CPUS_OPTION, nlen)
                                  ? &o->cpus
                              : nlen == sizeof HOOK_NODE_WIDE_OPTION - 1 && !strncmp(t, HOOK_NODE_WIDE_OPTION, nlen)
                                  ? &o->node_wide
                                  : NULL;
        if (!target) {
            s_add(&msg, t[0] == '-' ? "unknown option '" : "unexpected argument '");
            s_shown_n(&msg, t, t[0] == '-' ? nlen : strlen(t));
            s_add(&msg, "'");
            s_add(&msg, unknown_hint);
            return -1;
        }
        if (!eq && i + 1 >= argc) {
            s_add(&msg, "option ");
            s_addn(&msg, t, nlen);
            s_add(&msg, " needs a value");
            return -1;
        }
        if (*target) {
            s_add(&msg, "option ");
            s_addn(&msg, t, nlen);
            s_add(&msg, " is given twice");
            return -1;
        }
        *target = eq ? eq + 1 : argv[++i];
    }
    return 0;
}

struct hook_input {
    long pid;
    const char *bundle;
};

static int hook_state(const jval *state, struct hook_input *in)
{
    static const char where[] = "the OCI state on stdin";
    if (state->type != J_OBJECT) {
        s_addf(&msg, "%s is %s, not an object", where, JTYPE_NAMES[state->type]);
        s_add(&msg, " (cmk hook runs as an OCI createRuntime hook; the runtime writes the state)");
        return fail(HOOK_EXIT_STATE);
    }
    const jval *pid = j_get(state, "pid"), *bundle = j_get(state, "bundle");
    if (!pid || (pid->type == J_NUMBER && !strcmp(pid->text, "0"))) {
        s_addf(&msg, "%s has no \"pid\": run cmk hook at createRuntime, once the container's process exists", where);
        return fail(HOOK_EXIT_STATE);
    }
    if (pid->type != J_NUMBER || pid->len > 9 || !is_digits(pid->text, pid->len)) {
        s_addf(&msg, "\"pid\" in %s is not a process ID: ", where);
        if (pid->type == J_NUMBER || pid->type == J_BOOL || pid->type == J_NULL)
            s_shown_n(&msg, pid->text, pid->len);
        else
            s_add(&msg, JTYPE_NAMES[pid->type]);
        return fail(HOOK_EXIT_STATE);
    }
    in->pid = strtol(pid->text, NULL, 10);
    if (!bundle || bundle->type != J_STRING || !bundle->len || memchr(bundle->text, 0, bundle->len)) {
        s_addf(&msg, "%s has no \"bundle\" directory (the container's config.json is read from it)", where);
        return fail(HOOK_EXIT_STATE);
    }
    in->bundle = bundle->text;
    return 0;
}

/* "the container's config PATH" + what, as the start of msg. */
static void config_where(const char *path, const char *what)
{
    s_add(&msg, "the container's config ");
    s_shown(&msg, path);
    s_add(&msg, what);
}

static int config_error(const char *path, const char *what)
{
    config_where(path, what);
    return fail(HOOK_EXIT_CONFIG);
}

/* A --cpus value into cpus; 0, or the status once msg is printed. `where` prefixes the message. */
static int trusted_cpus(const char *raw, const char *where, cpuset *cpus)
{
    str saved = msg;
    msg = (str){0};
    if (!parse_env_cpus(HOOK_CPUS_OPTION, raw, cpus)) {
        free(msg.p);
        msg = saved;
        return 0;
    }
    str detail = msg;
    msg = saved;
    s_add(&msg, where);
    s_addn(&msg, detail.p, detail.len);
    free(detail.p);
    return fail(HOOK_EXIT_MALFORMED);
}

/* Is this hook entry's argv `cmk hook ...` (argv[0] may be a path ending in /cmk)? */
static int is_cmk_hook(const jval *args)
{
    if (args->count < 2 || args->items[0].type != J_STRING || args->items[1].type != J_STRING)
        return 0;
    const jval *a0 = &args->items[0], *a1 = &args->items[1];
    const char *base = strrchr(a0->text, '/');
    base = base ? base + 1 : a0->text;
    return strlen(base) == a0->len - (size_t)(base - a0->text) && !strcmp(base, "cmk") &&
           a1->len == 4 && !strcmp(a1->text, "hook");
}

/* What the `cmk hook --cpus` entries of a container's config.json say. */
struct hook_entries {
    cpuset cpus; /* the union of their --cpus */
    int count, exclusive; /* how many there are, and how many of them are marked --exclusive */
};

/* The union of the --cpus of every `cmk hook` createRuntime entry in config; own (unless NULL: the
 * node-wide hook) must be one of them. */
static int hook_cpus(const jval *config, const char *path, const cpuset *own, const char *own_text,
                     struct hook_entries *found_entries)
{
    if (config->type != J_OBJECT)
        return config_error(path, " is not an object");
    const jval *hooks = j_get(config, "hooks");
    const jval *list = hooks && hooks->type == J_OBJECT ? j_get(hooks, "createRuntime") : NULL;
    if (hooks && hooks->type != J_OBJECT && hooks->type != J_NULL)
        return config_error(path, ": hooks is not an object");
    if (list && list->type != J_ARRAY && list->type != J_NULL)
        return config_error(path, ": hooks.createRuntime is not an array");
    int found = 0;
    for (size_t i = 0; list && list->type == J_ARRAY && i < list->count; i++) {
        const jval *entry = &list->items[i], *args = j_get(entry, "args");
        if (entry->type != J_OBJECT || (args && args->type != J_ARRAY && args->type != J_NULL)) {
            config_where(path, "");
            if (entry->type != J_OBJECT)
                s_addf(&msg, ": hooks.createRuntime[%zu] is not an object", i);
            else
                s_addf(&msg, ": hooks.createRuntime[%zu].args is not an array", i);
            return fail(HOOK_EXIT_CONFIG);
        }
        if (!args || args->type != J_ARRAY || !is_cmk_hook(args))
            continue; /* another hook: not ours to judge */
        str where = {0};
        s_add(&where, "the container's config ");
        s_shown(&where, path);
        s_addf(&where, ": hooks.createRuntime[%zu] (cmk hook): ", i);
        char **argv = calloc(args->count, sizeof *argv);
        if (!argv)
            out_of_memory();
        for (size_t k = 2; k < args->count; k++) {
            const jval *a = &args->items[k];
            if (a->type != J_STRING || memchr(a->text, 0, a->len)) {
                s_add(&msg, where.p);
                if (a->type == J_STRING)
                    s_addf(&msg, "args[%zu] holds a NUL byte", k);
                else
                    s_addf(&msg, "args[%zu] is %s, not a string", k, JTYPE_NAMES[a->type]);
                return fail(HOOK_EXIT_MALFORMED);
            }
            argv[k - 2] = a->text;
        }
        struct hook_opts o = {0};
        str saved = msg;
        msg = (str){0};
        if (parse_hook_opts(args->count - 2, argv, &o, "") || o.help) {
            str detail = msg;
            msg = saved;
            s_add(&msg, where.p);
            s_addn(&msg, detail.p, detail.len);
            if (o.help)
                s_add(&msg, "'--help' is not an option of a hook entry");
            return fail(HOOK_EXIT_MALFORMED);
        }
        msg = saved;
        free(argv);
        if (!o.cpus)
            continue; /* a cmk hook without CPUs adds none (it refuses to run itself) */
        cpuset entry_cpus = {0};
        int status = trusted_cpus(o.cpus, where.p, &entry_cpus);
        free(where.p);
        if (status)
            return status;
        for (size_t w = 0; w < MASK_WORDS; w++)
            found_entries->cpus.w[w] |= entry_cpus.w[w];
        found_entries->count++;
        found_entries->exclusive += o.exclusive;
        found |= own && !memcmp(&entry_cpus, own, sizeof entry_cpus);
    }
    if (found || !own)
        return 0;
    s_add(&msg, "this hook's " HOOK_CPUS_OPTION "=");
    s_shown(&msg, own_text);
    s_add(&msg, " is not in the createRuntime hooks of the container's config ");
    s_shown(&msg, path);
    s_add(&msg, ": the runtime runs the hooks it wrote there; " HOOK_NO_CPUS_HINT);
    return fail(HOOK_EXIT_NO_CPUS);
}

/* ---- hook: the cgroup ------------------------------------------------------- */

/* Reads a whole small regular file below dirfd (or AT_FDCWD); 0, or an errno / E_NOT_REGULAR / E_SYMLINK. */
static int read_file_at(int dirfd, const char *path, str *out)
{
    int fd = open_regular(dirfd, path, O_RDONLY);
    if (fd < 0)
        return -fd;
    int e = read_all(fd, out);
    close(fd);
    return e;
}

static int read_file(const char *path, str *out)
{
    return read_file_at(AT_FDCWD, path, out);
}

static int cgroup_error(int status, const char *path, const char *what, int e)
{
    s_add(&msg, what);
    s_shown(&msg, path);
    s_add(&msg, ": ");
    s_errno(&msg, e);
    return fail(status);
}

struct cgroup {
    int v2;
    str path; /* inside the hierarchy, from /proc/PID/cgroup */
    str dir; /* the directory on disk */
};

/* Finds the process's cgroup of controller ctl (cpuset, cpu): the v1 line naming ctl, else the v2 "0::" line. */
static int find_cgroup(const char *proc_root, long pid, const char *ctl, struct cgroup *cg)
{
    size_t ctl_len = strlen(ctl);
    str path = {0}, text = {0};
    s_addf(&path, "%s/%ld/cgroup", proc_root, pid);
    int e = read_file(path.p, &text);
    if (e == ENOENT || e == ESRCH) {
        s_addf(&msg, "the container's process %ld is gone (", pid);
        s_shown(&msg, path.p);
        s_add(&msg, " does not exist): it exited before its start hook ran");
        return fail(HOOK_EXIT_GONE);
    }
    if (e)
        return cgroup_error(HOOK_EXIT_NO_CGROUP, path.p, "cannot read ", e);
    const char *v2 = NULL, *v1 = NULL;
    size_t v2_len = 0, v1_len = 0;
    for (char *line = text.p; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        char *c1 = memchr(line, ':', n);
        char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line)) : NULL;
        if (c2) {
            const char *rest = c2 + 1;
            size_t rest_len = n - (size_t)(rest - line);
            if (c1 == line + 1 && line[0] == '0' && c2 == c1 + 1) {
                v2 = rest;
                v2_len = rest_len;
            }
            for (const char *c = c1 + 1; c < c2;) { /* the comma-separated controllers */
                const char *comma = memchr(c, ',', (size_t)(c2 - c));
                const char *stop = comma ? comma : c2;
                if ((size_t)(stop - c) == ctl_len && !memcmp(c, ctl, ctl_len)) {
                    v1 = rest;
                    v1_len = rest_len;
                }
                c = stop + 1;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    if (!v1 && !v2) {
        s_addf(&msg, "process %ld is in no %s cgroup (", pid, ctl);
        s_shown(&msg, path.p);
        s_addf(&msg, " has neither a %s nor a 0:: line): the kernel needs the %s controller", ctl, ctl);
        return fail(HOOK_EXIT_NO_CGROUP);
    }
    cg->v2 = !v1;
    s_addn(&cg->path, v1 ? v1 : v2, v1 ? v1_len : v2_len);
    return 0;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(str *s, const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '\\' && i + 3 < n && t[i + 1] >= '0' && t[i + 1] <= '3' &&
            t[i + 2] >= '0' && t[i + 2] <= '7' && t[i + 3] >= '0' && t[i + 3] <= '7') {
            char c = (char)((t[i + 1] - '0') * 64 + (t[i + 2] - '0') * 8 + (t[i + 3] - '0'));
            s_addn(s, &c, 1);
            i += 3;
        } else {
            s_addn(s, &t[i], 1);
        }
    }
}

/* Splits a mountinfo line into fields at spaces; returns how many (at most max). */
static size_t split_fields(char *line, char **fields, size_t max)
{
    size_t n = 0;
    for (char *p = line; *p && n < max;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        fields[n++] = p;
        while (*p && *p != ' ')
            p++;
        if (*p)
            *p++ = '\0';
    }
    return n;
}

/* The mount point of the hierarchy holding cg (v1: the one of controller ctl), from mountinfo, joined with
 * cg's path into cg->dir. */
static int find_mount(const char *proc_root, long pid, const char *ctl, struct cgroup *cg)
{
    size_t ctl_len = strlen(ctl);
    str path = {0}, text = {0};
    s_add(&path, proc_root);
    s_add(&path, "/self/mountinfo");
    int e = read_file(path.p, &text);
    if (e)
        return cgroup_error(HOOK_EXIT_NO_CGROUP, path.p, "cannot read ", e);
    for (char *line = text.p; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *f[64];
        size_t n = split_fields(line, f, 64);
        size_t dash = 6;
        while (dash < n && strcmp(f[dash], "-"))
            dash++;
        if (dash + 3 < n) { /* after "-": fstype, source, super options */
            const char *fstype = f[dash + 1], *super = f[dash + 3];
            int match = 0;
            if (cg->v2) {
                match = !strcmp(fstype, "cgroup2");
            } else if (!strcmp(fstype, "cgroup")) {
                for (const char *o = super; *o;) {
                    const char *comma = strchr(o, ',');
                    size_t len = comma ? (size_t)(comma - o) : strlen(o);
                    if (len == ctl_len && !memcmp(o, ctl, ctl_len))
                        match = 1;
                    o += len + (comma ? 1 : 0);
                }
            }
            if (match) {
                str root = {0}, mnt = {0};
                unescape_octal(&root, f[3], strlen(f[3]));
                unescape_octal(&mnt, f[4], strlen(f[4]));
                /* a mount of a sub-tree (root not "/") shows the paths below its root */
                const char *rel = cg->path.p;
                if (strcmp(root.p, "/")) {
                    size_t rn = root.len;
                    if (strncmp(rel, root.p, rn) || (rel[rn] && rel[rn] != '/'))
                        goto next;
                    rel += rn;
                }
                s_addn(&cg->dir, mnt.p, mnt.len);
                s_add(&cg->dir, rel);
                return 0;
            }
        }
    next:
        line = nl ? nl + 1 : NULL;
    }
    s_addf(&msg, "no %s%s hierarchy holding process %ld's cgroup ", cg->v2 ? "cgroup2" : "cgroup v1 ",
           cg->v2 ? "" : ctl, pid);
    s_shown(&msg, cg->path.p);
    s_add(&msg, " is mounted (read ");
    s_shown(&msg, path.p);
    s_add(&msg, "): mount it, or name it with --cgroup-root");
    return fail(HOOK_EXIT_NO_CGROUP);
}

/* The kernel's list form (as cpuset files hold it) into a set; 0 or -1. */
static int parse_kernel_list(const char *text, cpuset *set)
{
    str trimmed = {0};
    const char *t = text, *end = text + strlen(text);
    while (t < end && is_space(*t))
        t++;
    while (end > t && is_space(end[-1]))
        end--;
    if (t == end)
        return 0; /* an empty cpuset */
    s_addn(&trimmed, t, (size_t)(end - t));
    str saved = msg;
    msg = (str){0};
    int bad = parse_env_cpus("cpuset", trimmed.p, set);
    free(msg.p);
    msg = saved;
    free(trimmed.p);
    return bad;
}

/* The parent's path for messages: cg->dir without its last component (the directory itself is read
 * through "..", so this text never decides what is opened). */
static void parent_path(const char *dir, str *out)
{
    const char *slash = strrchr(dir, '/');
    if (slash && slash != dir)
        s_addn(out, dir, (size_t)(slash - dir));
    else if (slash)
        s_add(out, "/");
    else {
        s_add(out, dir);
        s_add(out, "/..");
    }
}

/* Writes text to the cgroup file name below dirfd in one write(2); file is its path for messages. */
static int write_cgroup_file(int dirfd, const char *name, const char *file, const char *text, const char *what,
                             int status)
{
    size_t len = strlen(text);
    int fd = open_regular(dirfd, name, O_WRONLY | O_TRUNC);
    if (fd < 0)
        return cgroup_error(status, file, what, -fd);
    ssize_t n;
    do
        n = write(fd, text, len);
    while (n < 0 && errno == EINTR);
    int e = n < 0 ? errno : (size_t)n != len ? EIO : 0;
    if (close(fd) && !e)
        e = errno;
    if (e)
        return cgroup_error(status, file, what, e);
    return 0;
}

static int write_cpus(int dirfd, const char *file, const cpuset *cpus)
{
    str list = {0};
    s_ranges(&list, cpus);
    s_add(&list, "\n");
    return write_cgroup_file(dirfd, "cpuset.cpus", file, list.p, "cannot write the container's CPUs to ",
                             HOOK_EXIT_CGROUP_WRITE);
}

/* Removes the CFS quota of the container's own cpu cgroup (v1 cpu.cfs_quota_us = -1; v2 cpu.max = max,
 * its period kept): it holds only exclusive cores, which nobody else runs on, so a quota only throttles
 * its bursts. The pod's cgroup (the parent) is left as the kubelet set it. A cgroup without the file has
 * no cpu controller, so no quota to remove. */
static int remove_quota(const char *proc_root, long pid, const struct cgroup *cpuset_cg)
{
    struct cgroup cg = {0};
    int status;
    if (cpuset_cg->v2) {
        cg = *cpuset_cg; /* one unified hierarchy: the same directory */
    } else if ((status = find_cgroup(proc_root, pid, "cpu", &cg)) || (status = find_mount(proc_root, pid, "cpu", &cg))) {
        return status;
    }
    if (!strcmp(cg.path.p, "/") || !*cg.path.p) {
        s_addf(&msg, "process %ld is in the root cpu cgroup: refusing to change the whole host's CFS quota", pid);
        return fail(HOOK_EXIT_QUOTA);
    }
    const char *name = cg.v2 ? "cpu.max" : "cpu.cfs_quota_us";
    str file = {0};
    s_add(&file, cg.dir.p);
    s_add(&file, "/");
    s_add(&file, name);
    int dirfd = open(cg.dir.p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return cgroup_error(HOOK_EXIT_QUOTA, cg.dir.p, "cannot open the container's cpu cgroup ",
                            errno == ELOOP ? E_SYMLINK : errno);
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) && errno == ENOENT) {
        close(dirfd);
        return 0;
    }
    status = write_cgroup_file(dirfd, name, file.p, cg.v2 ? "max\n" : "-1\n",
                               "cannot remove the CFS quota of the container's exclusive cores in ", HOOK_EXIT_QUOTA);
    close(dirfd);
    return status;
}

/* ---- hook: the pod's cgroup, the bound of processes that join the container later ---------------- */

static int cs_within(const cpuset *a, const cpuset *b)
{
    for (size_t i = 0; i < MASK_WORDS; i++)
        if (a->w[i] & ~b->w[i])
            return 0;
    return 1;
}

static int cs_empty(const cpuset *a)
{
    for (size_t i = 0; i < MASK_WORDS; i++)
        if (a->w[i])
            return 0;
    return 1;
}

/* The CPUs a cgroup file below dirfd holds; 0, or -1 when it is missing, unreadable, empty or no cpu list. */
static int read_cpus_at(int dirfd, const char *name, cpuset *cpus)
{
    str text = {0};
    int bad = read_file_at(dirfd, name, &text) || memchr(text.p, 0, text.len) || parse_kernel_list(text.p, cpus);
    free(text.p);
    return bad || cs_empty(cpus) ? -1 : 0;
}

/* Writes cpus to the cpuset.cpus below dirfd where a failure is no refusal (the caller goes on as before):
 * 0, or -1 with the cgroup as it was. */
static int try_write_cpus(int dirfd, const cpuset *cpus)
{
    str list = {0};
    s_ranges(&list, cpus);
    s_add(&list, "\n");
    int fd = open_regular(dirfd, "cpuset.cpus", O_WRONLY | O_TRUNC);
    int bad = fd < 0 || write_all(fd, list.p, list.len);
    if (fd >= 0 && close(fd))
        bad = 1;
    free(list.p);
    return bad ? -1 : 0;
}

/* Gives the pod's cgroup (parentfd) the container's CPUs it lacks, when the pod's own parent has them: an
 * earlier hook narrowed the pod to the containers it had then (bound_pod), and this container's devices are
 * the kubelet's to hand out. allowed becomes the pod's CPUs; nothing changes if anything is amiss (the
 * caller then refuses the CPUs outside, as before). */
static void widen_pod(int parentfd, const char *effective, const cpuset *cpus, cpuset *allowed)
{
    cpuset above = {0}, own = {0};
    int up = openat(parentfd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (up < 0)
        return;
    int ok = !read_cpus_at(up, effective, &above) && cs_within(cpus, &above) &&
             !read_cpus_at(parentfd, "cpuset.cpus", &own);
    close(up);
    if (!ok)
        return;
    for (size_t i = 0; i < MASK_WORDS; i++)
        own.w[i] |= cpus->w[i];
    if (!try_write_cpus(parentfd, &own))
        *allowed = own;
}

/* The pod sandbox's container ID as the runtime wrote it into the container's config.json annotations
 * (containerd, CRI-O), or NULL: only a 64-hex ID is taken, since it names a directory below the pod. */
static const char *sandbox_id(const jval *config)
{
    static const char *const keys[] = {HOOK_SANDBOX_ANNOTATIONS};
    const jval *annotations = j_get(config, "annotations");
    for (size_t k = 0; annotations && annotations->type == J_OBJECT && k < sizeof keys / sizeof *keys; k++) {
        const jval *id = j_get(annotations, keys[k]);
        if (!id || id->type != J_STRING || id->len != 64)
            continue;
        size_t hex = 0;
        while (hex < 64 && ((id->text[hex] >= '0' && id->text[hex] <= '9') || (id->text[hex] >= 'a' && id->text[hex] <= 'f')))
            hex++;
        if (hex == 64)
            return id->text;
    }
    return NULL;
}

/* 1 if the cgroup directory name is the one a runtime gives the container id: <id>, cri-containerd-<id>.scope,
 * crio-<id>(.scope), docker-<id>.scope. */
static int names_container(const char *name, const char *id)
{
    static const char *const prefixes[] = {"", "cri-containerd-", "crio-", "docker-"};
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
        size_t n = strlen(prefixes[p]);
        if (!strncmp(name, prefixes[p], n) && !strncmp(name + n, id, 64) &&
            (!name[n + 64] || !strcmp(name + n + 64, ".scope")))
            return 1;
    }
    return 0;
}

/* The pod's sandbox (pause) container, when no hook confined it: containerd builds its spec from its own
 * defaults, without the base spec's node-wide hook. It only sleeps, so it gets this container's CPUs, and
 * the pod can then be narrowed. A failure leaves it as it was, and the pod unnarrowed. */
static void confine_sandbox(int child, const cpuset *cpus)
{
    struct stat st;
    if (!fstatat(child, HOOK_CONFINED_CGROUP, &st, AT_SYMLINK_NOFOLLOW))
        return; /* a hook ran for it (CRI-O's hooks.d reaches sandboxes): already confined */
    if (try_write_cpus(child, cpus)) {
        /* left as it was */
    }
}

/* Narrows the pod's cgroup (parentfd, the container's parent) to the union of its children's CPUs. A
 * process that joins the container later (kubectl exec: runc and crun put it in the container's own cgroup,
 * not below it) sees that cgroup as its root when it makes a cgroup namespace, and the pod is its bound:
 * with every child confined (the sandbox by the node-wide hook, or here when the runtime names it), no
 * more than what the pod's containers were given. Since the kubelet frees devices only with the pod, the
 * union never holds CPUs another pod was given since. A child without CPUs of its own (v2: the pod's; v1:
 * not set up yet) leaves the pod as it is, and so does a pod without cpuset files; the caller never passes
 * the hierarchy's root. */
static int bound_pod(int parentfd, const char *pod, const char *effective, const char *sandbox, const cpuset *cpus)
{
    cpuset own = {0}, children = {0};
    struct stat st;
    if (fstatat(parentfd, "cpuset.cpus", &st, AT_SYMLINK_NOFOLLOW))
        return 0; /* no cpuset files: the cpuset controller is not enabled for the pod */
    if (read_cpus_at(parentfd, "cpuset.cpus", &own) && read_cpus_at(parentfd, effective, &own))
        return 0; /* v2's empty cpuset.cpus: the pod has its parent's CPUs */
    int fd = openat(parentfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd < 0 ? NULL : fdopendir(fd);
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    int seen = 0, whole = 1;
    for (struct dirent *d; whole && (d = readdir(dir));) {
        struct stat st;
        if (d->d_name[0] == '.' || fstatat(parentfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode))
            continue;
        cpuset one = {0};
        int child = openat(parentfd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (child >= 0 && sandbox && names_container(d->d_name, sandbox))
            confine_sandbox(child, cpus);
        whole = child >= 0 && !read_cpus_at(child, "cpuset.cpus", &one) && ++seen <= HOOK_MAX_POD_CHILDREN;
        if (child >= 0)
            close(child);
        for (size_t i = 0; i < MASK_WORDS; i++)
            children.w[i] |= one.w[i] & own.w[i];
    }
    closedir(dir);
    if (!whole || !seen || !memcmp(&children, &own, sizeof own))
        return 0;
    str list = {0}, file = {0};
    s_ranges(&list, &children);
    s_add(&list, "\n");
    s_add(&file, pod);
    s_add(&file, "/cpuset.cpus");
    int status = write_cgroup_file(parentfd, "cpuset.cpus", file.p, list.p,
                                   "cannot narrow the pod's cgroup to its containers' CPUs in ", HOOK_EXIT_CGROUP_WRITE);
    free(list.p);
    free(file.p);
    return status;
}

static int confine_below(int dirfd, const struct cgroup *cg, const cpuset *cpus);

static int confine_cgroup(const struct cgroup *cg, long pid, const cpuset *cpus, const char *sandbox)
{
    str file = {0}, parent = {0}, text = {0};
    struct stat st;
    if (!strcmp(cg->path.p, "/") || !*cg->path.p) {
        s_addf(&msg, "process %ld is in the root cpuset cgroup: refusing to confine the whole host "
                     "(run the container in a cgroup of its own)", pid);
        return fail(HOOK_EXIT_NO_CGROUP);
    }
    /* Every file below is opened relative to this directory, never by a path a symlink could redirect. */
    int dirfd = open(cg->dir.p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0) {
        int e = errno;
        s_addf(&msg, "the cpuset cgroup of process %ld, ", pid);
        s_shown(&msg, cg->dir.p);
        if (e == ENOENT) {
            s_add(&msg, ", does not exist");
        } else {
            s_add(&msg, ", cannot be opened: ");
            s_errno(&msg, e == ELOOP ? E_SYMLINK : e);
        }
        return fail(HOOK_EXIT_NO_CGROUP);
    }
    s_add(&file, cg->dir.p);
    s_add(&file, "/cpuset.cpus");
    if (fstatat(dirfd, "cpuset.cpus", &st, AT_SYMLINK_NOFOLLOW) && errno == ENOENT) {
        s_add(&msg, "the cgroup ");
        s_shown(&msg, cg->dir.p);
        s_add(&msg, " has no cpuset.cpus: enable the cpuset controller in its parent's cgroup.subtree_control");
        return fail(HOOK_EXIT_NO_CGROUP);
    }
    str pod = {0};
    parent_path(cg->dir.p, &pod);
    const char *effective = cg->v2 ? "cpuset.cpus.effective" : "cpuset.effective_cpus";
    s_add(&parent, pod.p);
    s_add(&parent, "/");
    s_add(&parent, effective);
    cpuset allowed = {0}, outside = {0};
    int parentfd = openat(dirfd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = parentfd < 0 ? errno : read_file_at(parentfd, effective, &text);
    if (e)
        return cgroup_error(HOOK_EXIT_CGROUP_WRITE, parent.p, "cannot read the parent cgroup's CPUs from ", e);
    if (memchr(text.p, 0, text.len) || parse_kernel_list(text.p, &allowed)) {
        s_add(&msg, "cannot read the parent cgroup's CPUs from ");
        s_shown(&msg, parent.p);
        s_add(&msg, ": '");
        s_shown_n(&msg, text.p, text.len);
        s_add(&msg, "' is not a cpu list");
        return fail(HOOK_EXIT_CGROUP_WRITE);
    }
    if (!cs_within(cpus, &allowed))
        widen_pod(parentfd, effective, cpus, &allowed);
    int count = 0;
    for (unsigned c = 0; c < MAX_CPUS; c++)
        if (cs_has(cpus, c) && !cs_has(&allowed, c)) {
            cs_add(&outside, c);
            count++;
        }
    if (count) {
        s_add(&msg, "the container's CPUs ");
        s_ranges(&msg, cpus);
        s_add(&msg, " are not within its parent cgroup's CPUs ");
        s_ranges(&msg, &allowed);
        s_add(&msg, count == 1 ? " (CPU " : " (CPUs ");
        s_ranges(&msg, &outside);
        s_add(&msg, " outside, from ");
        s_shown(&msg, parent.p);
        s_add(&msg, "): the pools' CPUs must stay within the pods' cgroup");
        return fail(HOOK_EXIT_OUTSIDE);
    }
    int status = write_cpus(dirfd, file.p, cpus);
    if (!status)
        status = confine_below(dirfd, cg, cpus);
    if (!status && strrchr(cg->path.p, '/') != cg->path.p) /* the parent is not the hierarchy's root */
        status = bound_pod(parentfd, pod.p, effective, sandbox, cpus);
    close(parentfd);
    close(dirfd);
    return status;
}

/* A container one of whose other cmk hook entries already ran (a container holding several CDI devices runs
 * one hook per device) has its processes in HOOK_CONFINED_CGROUP: it is confined again from its own cgroup,
 * that cgroup's parent, so running twice stays idempotent. */
static void container_cgroup(struct cgroup *cg)
{
    static const char leaf[] = "/" HOOK_CONFINED_CGROUP;
    size_t n = sizeof leaf - 1;
    str *parts[] = {&cg->path, &cg->dir};
    for (size_t i = 0; i < 2; i++) {
        str *s = parts[i];
        if (s->len > n && !strcmp(s->p + s->len - n, leaf))
            s->p[s->len -= n] = '\0';
    }
}

/* Moves every process of the container's cgroup (dirfd, already narrowed to cpus) into HOOK_CONFINED_CGROUP
 * below it. The container's own cgroup is then the bound of whatever its processes do to the cgroup they are
 * in: a root process that makes a cgroup namespace sees its cgroup as the root of the hierarchy it mounts
 * there, and may write that root's cpuset.cpus, but v1 refuses CPUs outside the parent's cpuset.cpus and v2
 * confines a child to its parent's effective CPUs (docs/design/hook.md, "The bound"). v1's new cpuset starts empty,
 * so it gets the container's memory nodes and the CPUs; v2's child has no cpuset files of its own (the
 * container's subtree_control enables nothing), and the container's cpuset governs it. */
static int confine_below(int dirfd, const struct cgroup *cg, const cpuset *cpus)
{
    str dir = {0}, file = {0}, text = {0};
    struct stat st;
    s_add(&dir, cg->dir.p);
    s_add(&dir, "/" HOOK_CONFINED_CGROUP);
    const char *what = "cannot create the cgroup that bounds the container's processes, ";
    if (mkdirat(dirfd, HOOK_CONFINED_CGROUP, 0755) && errno != EEXIST)
        return cgroup_error(HOOK_EXIT_CGROUP_WRITE, dir.p, what, errno);
    int leaf = openat(dirfd, HOOK_CONFINED_CGROUP, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (leaf < 0)
        return cgroup_error(HOOK_EXIT_CGROUP_WRITE, dir.p, what, errno == ELOOP ? E_SYMLINK : errno);
    int status = 0, e;
    if (!fstatat(leaf, "cpuset.cpus", &st, AT_SYMLINK_NOFOLLOW)) {
        s_add(&file, dir.p);
        s_add(&file, "/cpuset.cpus");
        if (!cg->v2 && (e = read_file_at(dirfd, "cpuset.mems", &text)))
            status = cgroup_error(HOOK_EXIT_CGROUP_WRITE, cg->dir.p, "cannot read the memory nodes of ", e);
        else if (!cg->v2)
            status = write_cgroup_file(leaf, "cpuset.mems", dir.p, text.p, "cannot give the memory nodes to ",
                                       HOOK_EXIT_CGROUP_WRITE);
        if (!status)
            status = write_cpus(leaf, file.p, cpus);
    }
    text.len = 0;
    if (!status && (e = read_file_at(dirfd, "cgroup.procs", &text)))
        status = cgroup_error(HOOK_EXIT_CGROUP_WRITE, cg->dir.p, "cannot list the processes of ", e);
    for (char *line = text.p; !status && line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        int fd = open_regular(leaf, "cgroup.procs", O_WRONLY);
        e = fd < 0 ? -fd : (write_all(fd, line, strlen(line)) && errno != ESRCH) ? errno : 0; /* ESRCH: it exited */
        if (fd >= 0 && close(fd) && !e)
            e = errno;
        if (e)
            status = cgroup_error(HOOK_EXIT_CGROUP_WRITE, dir.p, "cannot move the container's processes into ", e);
        line = nl ? nl + 1 : NULL;
    }
    close(leaf);
    return status;
}

/* ---- hook: affinity and the command ------------------------------------------ */

/* Pins the init process, then every other task of it present (a thread that exited meanwhile is fine). */
static int confine_tasks(const char *proc_root, long pid, const cpuset *cpus)
{
    if (syscall(SYS_sched_setaffinity, (pid_t)pid, sizeof *cpus, cpus) < 0) {
        int e = errno;
        if (e == ESRCH) {
            s_addf(&msg, "the container's process %ld is gone: it exited before its start hook ran", pid);
            return fail(HOOK_EXIT_GONE);
        }
        s_addf(&msg, "cannot pin the container's process %ld to CPUs ", pid);
        s_ranges(&msg, cpus);
        s_add(&msg, ": ");
        s_errno(&msg, e);
        return fail(HOOK_EXIT_AFFINITY);
    }
    str path = {0};
    s_addf(&path, "%s/%ld/task", proc_root, pid);
    DIR *dir = opendir(path.p);
    if (!dir)
        return 0; /* the cgroup already holds every task; the init process is pinned */
    for (struct dirent *d; (d = readdir(dir));) {
        size_t n = strlen(d->d_name);
        if (n == 0 || n > 9 || !is_digits(d->d_name, n))
            continue;
        long tid = strtol(d->d_name, NULL, 10);
        if (tid != pid && syscall(SYS_sched_setaffinity, (pid_t)tid, sizeof *cpus, cpus) < 0 && errno != ESRCH) {
            int e = errno;
            closedir(dir);
            s_addf(&msg, "cannot pin thread %ld of the container's process %ld to CPUs ", tid, pid);
            s_ranges(&msg, cpus);
            s_add(&msg, ": ");
            s_errno(&msg, e);
            return fail(HOOK_EXIT_AFFINITY);
        }
    }
    closedir(dir);
    return 0;
}

/* The infra pool's CPUs from the node-local record the daemon and `cmk install` write (atomically) into
 * cpus: 0; -1 if there is no record yet; else the status once msg is printed. */
static int infra_record(const char *path, cpuset *cpus)
{
    str text = {0};
    int e = read_file(path, &text);
    if (e == ENOENT)
        return -1;
    if (e) {
        s_add(&msg, "cannot read the node's infra record ");
        s_shown(&msg, path);
        s_add(&msg, ": ");
        if (e == EFBIG)
            s_addf(&msg, "it is larger than %d bytes", HOOK_MAX_JSON_BYTES);
        else
            s_errno(&msg, e);
        s_add(&msg, ": " HOOK_RECORD_HINT);
        return fail(HOOK_EXIT_RECORD);
    }
    int empty = 1;
    for (size_t i = 0; i < text.len && empty; i++)
        empty = is_space(text.p[i]);
    if (empty || memchr(text.p, 0, text.len) || parse_kernel_list(text.p, cpus)) {
        s_add(&msg, "the node's infra record ");
        s_shown(&msg, path);
        s_add(&msg, " holds '");
        s_shown_n(&msg, text.p, text.len > 64 ? 64 : text.len);
        s_add(&msg, "', not a cpu list: " HOOK_RECORD_HINT);
        return fail(HOOK_EXIT_RECORD);
    }
    return 0;
}

static int hook_usage(void)
{
    s_add(&msg, " (see '" HOOK_PROG " --help')");
    return fail(HOOK_EXIT_USAGE);
}

static int hook(int argc, char **argv)
{
    struct hook_opts o = {0};
    static cpuset own;
    prog = HOOK_PROG;
    if (parse_hook_opts((size_t)argc, argv, &o, ": the OCI state comes on stdin"))
        return hook_usage();
    if (o.help)
        return write_all(1, HOOK_HELP, sizeof HOOK_HELP - 1) ? 1 : HOOK_EXIT_OK;
    const char *proc_root = o.proc_root ? o.proc_root : HOOK_DEFAULT_PROC_ROOT, *cgroup_root = o.cgroup_root;
    if (o.node_wide && (o.cpus || o.exclusive || !*o.node_wide)) {
        s_add(&msg, o.cpus || o.exclusive ? HOOK_NODE_WIDE_OPTION " takes no " HOOK_CPUS_OPTION " or " HOOK_EXCLUSIVE_OPTION
                                          : HOOK_NODE_WIDE_OPTION " needs the infra record's path");
        s_add(&msg, ": the node-wide hook takes them from the container's cmk hook entries");
        return hook_usage();
    }
    if (!o.cpus && !o.node_wide) {
        s_add(&msg, "no " HOOK_CPUS_OPTION "=LIST: " HOOK_NO_CPUS_HINT);
        return fail(HOOK_EXIT_NO_CPUS);
    }
    int status;
    if (o.cpus && (status = trusted_cpus(o.cpus, "this hook's ", &own)))
        return status;

    str input = {0}, config_text = {0}, config_path = {0};
    jval state, config;
    struct hook_input in = {0};
    int e = read_all(0, &input);
    if (e) {
        s_add(&msg, "cannot read the OCI state on stdin: ");
        if (e == EFBIG)
            s_addf(&msg, "it is larger than %d bytes", HOOK_MAX_JSON_BYTES);
        else
            s_errno(&msg, e);
        return fail(HOOK_EXIT_STATE);
    }
    if (j_parse(&input, "the OCI state on stdin", &state))
        return fail(HOOK_EXIT_STATE);
    if ((status = hook_state(&state, &in)))
        return status;
    s_add(&config_path, in.bundle);
    s_add(&config_path, "/config.json");
    e = read_file(config_path.p, &config_text);
    if (e) {
        s_add(&msg, "cannot read the container's config ");
        s_shown(&msg, config_path.p);
        s_add(&msg, ": ");
        if (e == EFBIG)
            s_addf(&msg, "it is larger than %d bytes", HOOK_MAX_JSON_BYTES);
        else
            s_errno(&msg, e);
        return fail(HOOK_EXIT_CONFIG);
    }
    str what = {0};
    s_add(&what, "the container's config ");
    s_shown(&what, config_path.p);
    if (j_parse(&config_text, what.p, &config))
        return fail(HOOK_EXIT_CONFIG);
    static struct hook_entries entries;
    if ((status = hook_cpus(&config, config_path.p, o.node_wide ? NULL : &own, o.cpus, &entries)))
        return status;
    if (!entries.count && (status = infra_record(o.node_wide, &entries.cpus)))
        return status < 0 ? HOOK_EXIT_OK : status; /* no record yet: the container starts as it was created */

    struct cgroup cg = {0};
    if ((status = find_cgroup(proc_root, in.pid, "cpuset", &cg)))
        return status;
    if (cgroup_root) {
        s_add(&cg.dir, cgroup_root);
        s_add(&cg.dir, !strcmp(cg.path.p, "/") ? "" : cg.path.p);
    } else if ((status = find_mount(proc_root, in.pid, "cpuset", &cg))) {
        return status;
    }
    container_cgroup(&cg);
    if ((status = confine_cgroup(&cg, in.pid, &entries.cpus, sandbox_id(&config))) || (status = confine_tasks(proc_root, in.pid, &entries.cpus)))
        return status;
    if (entries.count && entries.exclusive == entries.count)
        return remove_quota(proc_root, in.pid, &cg);
    return HOOK_EXIT_OK;
}

/* ---- subcommand dispatch ------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "isolate"))
        return isolate(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "hook"))
        return hook(argc - 2, argv + 2);
    if (argc < 2) {
        s_add(&msg, "missing COMMAND: this self-contained cmk runs 'cmk isolate' (see 'cmk isolate --help') "
                    "and 'cmk hook' (see 'cmk hook --help')");
    } else {
        s_add(&msg, "unknown command '");
        s_shown(&msg, argv[1]);
        s_add(&msg, "': this self-contained cmk runs only 'cmk isolate' and 'cmk hook'; the other commands come "
                    "with the cmk-deviceplugin package");
    }
    return fail_as("cmk", EXIT_USAGE);
}
