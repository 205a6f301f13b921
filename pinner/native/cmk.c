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
 * main() dispatches on a subcommand: `isolate` now, the CDI/OCI `hook` later.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void s_addn(str *s, const char *t, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->len + n + 1) * 2;
        char *p = realloc(s->p, cap);
        if (!p)
            out_of_memory();
        s->p = p;
        s->cap = cap;
    }
    memcpy(s->p + s->len, t, n);
    s->len += n;
    s->p[s->len] = '\0';
}

static void s_add(str *s, const char *t)
{
    s_addn(s, t, strlen(t));
}

static void s_addf(str *s, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        s_addn(s, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
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

static void s_errno(str *s, int e)
{
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

static str msg;

/* Print "PROG: error: <msg>\n" as one write and return the status. */
static int fail_as(const char *prog, int status)
{
    str line = {0};
    s_add(&line, prog);
    s_add(&line, ": error: ");
    s_addn(&line, msg.p ? msg.p : "", msg.len);
    s_add(&line, "\n");
    for (size_t done = 0; done < line.len;) {
        ssize_t n = write(2, line.p + done, line.len - done);
        if (n <= 0 && errno != EINTR)
            break;
        if (n > 0)
            done += (size_t)n;
    }
    return status;
}

static int fail(int status)
{
    return fail_as(PROG, status);
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

static int malformed(const struct pool *p, const char *raw)
{
    /* msg holds the detail so far; wrap it as pool_cpus does in isolate.py */
    str detail = msg;
    msg = (str){0};
    s_add(&msg, p->var);
    s_add(&msg, "='");
    s_shown(&msg, raw);
    s_add(&msg, "' is not a cpu list: ");
    s_addn(&msg, detail.p, detail.len);
    s_add(&msg, " (" LIST_HINT ")");
    free(detail.p);
    return fail(EXIT_MALFORMED);
}

/* Parses one CPU number of [t, t+n); 0 or the status. */
static int cpu_number(const struct pool *p, const char *raw, const char *t, size_t n, unsigned *out)
{
    if (n > 9 || !is_digits(t, n)) {
        s_add(&msg, "'");
        s_shown_n(&msg, t, n);
        s_add(&msg, "' is not a CPU number");
        return malformed(p, raw);
    }
    unsigned long v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned long)(t[i] - '0');
    if (v >= MAX_CPUS) {
        s_addf(&msg, "CPU %lu is out of range (0-%d)", v, MAX_CPUS - 1);
        return malformed(p, raw);
    }
    *out = (unsigned)v;
    return 0;
}

static int parse_env_cpus(const struct pool *p, const char *raw, cpuset *cpus)
{
    const char *entry = raw;
    for (;;) {
        const char *comma = strchr(entry, ',');
        size_t n = comma ? (size_t)(comma - entry) : strlen(entry);
        if (n == 0) {
            s_add(&msg, "empty entry between commas");
            return malformed(p, raw);
        }
        const char *dash = memchr(entry, '-', n);
        size_t first_len = dash ? (size_t)(dash - entry) : n;
        unsigned low, high;
        int status = cpu_number(p, raw, entry, first_len, &low);
        if (status)
            return status;
        high = low;
        if (dash && (status = cpu_number(p, raw, dash + 1, n - first_len - 1, &high)))
            return status;
        if (high < low) {
            s_add(&msg, "range '");
            s_shown_n(&msg, entry, n);
            s_add(&msg, "' runs backwards");
            return malformed(p, raw);
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
    return parse_env_cpus(p, raw, cpus);
}

static int check_allowed(const struct pool *p, const cpuset *cpus)
{
    cpuset allowed = {0}, missing = {0};
    int count = 0;
    if (syscall(SYS_sched_getaffinity, 0, sizeof allowed, &allowed) < 0) {
        s_add(&msg, "cannot read this process's allowed CPUs: ");
        s_errno(&msg, errno);
        return fail(EXIT_AFFINITY);
    }
    for (unsigned c = 0; c < MAX_CPUS; c++)
        if (cs_has(cpus, c) && !cs_has(&allowed, c)) {
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
    s_ranges(&msg, &allowed);
    s_add(&msg, ")");
    return fail(EXIT_NOT_ALLOWED);
}

/* ---- isolate: --socket-id ------------------------------------------------ */

static int socket_read_error(unsigned cpu, const char *path)
{
    /* msg holds the detail */
    str detail = msg;
    msg = (str){0};
    s_addf(&msg, "cannot read the socket of CPU %u from ", cpu);
    s_shown(&msg, path);
    s_add(&msg, ": ");
    s_addn(&msg, detail.p, detail.len);
    s_add(&msg, " (--socket-id needs sysfs; use --socket-id=-1 for any socket)");
    free(detail.p);
    return fail(EXIT_SOCKET);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int read_package(const char *root, unsigned cpu, long *package)
{
    str path = {0};
    char buf[65];
    size_t len = 0;
    s_add(&path, root);
    s_addf(&path, "/devices/system/cpu/cpu%u/topology/physical_package_id", cpu);
    int fd = open(path.p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        s_errno(&msg, errno);
        return socket_read_error(cpu, path.p);
    }
    while (len < 64) {
        ssize_t n = read(fd, buf + len, 64 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            s_errno(&msg, e);
            return socket_read_error(cpu, path.p);
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    size_t kept = 0; /* drop NULs, then surrounding whitespace */
    for (size_t i = 0; i < len; i++)
        if (buf[i])
            buf[kept++] = buf[i];
    char *t = buf, *end = buf + kept;
    while (t < end && is_space(*t))
        t++;
    while (end > t && is_space(end[-1]))
        end--;
    *end = '\0';
    const char *digits = *t == '-' ? t + 1 : t;
    size_t n = (size_t)(end - digits);
    if (n > 9 || !is_digits(digits, n)) {
        s_add(&msg, "'");
        s_shown(&msg, t);
        s_add(&msg, "' is not a number");
        return socket_read_error(cpu, path.p);
    }
    *package = strtol(t, NULL, 10);
    free(path.p);
    return 0;
}

static int on_socket(const struct pool *p, cpuset *cpus, long socket_id, const char *root)
{
    long packages[64];
    size_t npackages = 0;
    cpuset kept = {0};
    int any = 0;
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        if (!cs_has(cpus, c))
            continue;
        long package = 0;
        int status = read_package(root, c, &package);
        if (status)
            return status;
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
    static cpuset cpus;
    int status = parse_args(argc, argv, &r);
    if (status)
        return status;
    if (r.help) {
        for (size_t done = 0; done < sizeof HELP - 1;) {
            ssize_t n = write(1, HELP + done, sizeof HELP - 1 - done);
            if (n <= 0 && errno != EINTR)
                return 1;
            if (n > 0)
                done += (size_t)n;
        }
        return EXIT_HELP;
    }
    if ((status = pool_cpus(r.pool, &pool, &cpus)) || (status = check_allowed(pool, &cpus)))
        return status;
    if (r.socket_id != -1 && pool->socket_aware) {
        const char *root = getenv(ENV_SYSFS_ROOT);
        if ((status = on_socket(pool, &cpus, r.socket_id, root && *root ? root : DEFAULT_SYSFS_ROOT)))
            return status;
    }
    if (!r.no_affinity && syscall(SYS_sched_setaffinity, 0, sizeof cpus, &cpus) < 0) {
        int e = errno;
        s_add(&msg, "cannot pin to CPUs ");
        s_ranges(&msg, &cpus);
        s_add(&msg, ": ");
        s_errno(&msg, e);
        return fail(EXIT_AFFINITY);
    }
    set_assigned_env(&cpus);
    return exec_command(r.command, r.args, r.nargs);
}

/* ---- subcommand dispatch ------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "isolate"))
        return isolate(argc - 2, argv + 2);
    if (argc < 2) {
        s_add(&msg, "missing COMMAND: this self-contained cmk runs 'cmk isolate' (see 'cmk isolate --help')");
    } else {
        s_add(&msg, "unknown command '");
        s_shown(&msg, argv[1]);
        s_add(&msg, "': this self-contained cmk runs only 'cmk isolate'; the other commands come with the "
                    "cmk-deviceplugin package");
    }
    return fail_as("cmk", EXIT_USAGE);
}
