/* `cmk isolate` (isolate.h): the command line, the pool's CPUs, the affinity, the exec. */
#define _GNU_SOURCE
#include "isolate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cmk_generated.h"
#include "cpulist.h"
#include "sockets.h"

#define POOL_ENTRY(name, var, resource, socket_aware) {name, var, resource, socket_aware},
static const struct pinner_pool POOLS[] = {CMK_POOLS(POOL_ENTRY)};
#undef POOL_ENTRY

/* ---- the command line ------------------------------------------------------ */

struct request {
    const char *pool;
    long socket_id;
    int no_affinity, help;
    const char *command;
    char **args;
    int nargs;
};

static int usage(cmk_error *err)
{
    s_add(&err->msg, " (see '" PROG " --help')");
    return cmk_fail(err, EXIT_USAGE);
}

static void after_command_hint(const struct request *r, cmk_error *err)
{
    if (r->command)
        s_add(&err->msg, " (the command's arguments go after '--')");
}

static int unknown_option(const struct request *r, const char *t, size_t n, cmk_error *err)
{
    s_add(&err->msg, "unknown option '");
    s_shown_n(&err->msg, t, n);
    s_add(&err->msg, "'");
    after_command_hint(r, err);
    return usage(err);
}

static int parse_socket_id(const char *value, struct request *r, cmk_error *err)
{
    size_t n = strlen(value);
    if (!strcmp(value, "-1")) {
        r->socket_id = -1;
    } else if (n <= 9 && is_digits(value, n)) {
        r->socket_id = strtol(value, NULL, 10);
    } else {
        s_add(&err->msg, "--socket-id must be a socket number or -1 for any socket, not '");
        s_shown(&err->msg, value);
        s_add(&err->msg, "'");
        return usage(err);
    }
    return 0;
}

/* One `--name[=value]` at argv[*i - 1] (its value may take argv[*i]); 0, or the status. */
static int long_option(int argc, char **argv, int *i, struct request *r, cmk_error *err)
{
    const char *t = argv[*i - 1];
    const char *eq = strchr(t, '=');
    size_t nlen = eq ? (size_t)(eq - t) : strlen(t);
    const char *value = eq ? eq + 1 : NULL;
#define IS(name) (nlen == sizeof(name) - 1 && !strncmp(t, name, nlen))
    if (IS("--no-affinity")) {
        if (eq) {
            s_add(&err->msg, "option --no-affinity takes no value");
            return usage(err);
        }
        r->no_affinity = 1;
        return 0;
    }
    int which = IS("--pool") ? 1 : IS("--socket-id") ? 2 : IS("--namespace") ? 3 : 0;
#undef IS
    if (!which)
        return unknown_option(r, t, nlen, err);
    if (!value) {
        if (*i >= argc) {
            s_add(&err->msg, "option ");
            s_addn(&err->msg, t, nlen);
            s_add(&err->msg, " needs a value");
            return usage(err);
        }
        value = argv[(*i)++];
    }
    if (which == 1)
        r->pool = value;
    else if (which == 2)
        return parse_socket_id(value, r, err);
    return 0; /* --namespace: CMK's, accepted and unused */
}

/* CMK's `[OPTIONS] COMMAND [-- ARGS]` and the plain `[OPTIONS] -- COMMAND ARGS`. As in CMK (docopt), options
 * may also stand between COMMAND and `--`; everything after the first `--` is passed on untouched. 0, or the
 * status. */
static int parse_args(int argc, char **argv, struct request *r, cmk_error *err)
{
    int i = 0, status;
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
            if ((status = long_option(argc, argv, &i, r, err)))
                return status;
            continue;
        }
        if (t[0] == '-' && t[1])
            return unknown_option(r, t, strlen(t), err);
        if (r->command) {
            s_add(&err->msg, "unexpected argument '");
            s_shown(&err->msg, t);
            s_add(&err->msg, "' after COMMAND '");
            s_shown(&err->msg, r->command);
            s_add(&err->msg, "'");
            after_command_hint(r, err);
            return usage(err);
        }
        r->command = t;
    }
    if (!r->pool) {
        s_add(&err->msg, "missing --pool=POOL (one of: " POOL_NAMES ")");
        return usage(err);
    }
    if (!r->command || !*r->command) {
        s_add(&err->msg, "missing COMMAND to run");
        return usage(err);
    }
    return 0;
}

/* ---- the pool's CPUs ------------------------------------------------------- */

static int pool_cpus(const char *name, const struct pinner_pool **pool, cpuset *cpus, cmk_error *err)
{
    const struct pinner_pool *p = NULL;
    for (size_t i = 0; i < sizeof POOLS / sizeof POOLS[0]; i++)
        if (!strcmp(POOLS[i].name, name))
            p = &POOLS[i];
    if (!p) {
        s_add(&err->msg, "unknown pool '");
        s_shown(&err->msg, name);
        s_add(&err->msg, "': choose one of " POOL_NAMES);
        return cmk_fail(err, EXIT_UNKNOWN_POOL);
    }
    *pool = p;
    const char *raw = getenv(p->var);
    if (!raw || !*raw) {
        s_add(&err->msg, "this container holds no ");
        s_add(&err->msg, p->name);
        s_add(&err->msg, " CPUs (");
        s_add(&err->msg, p->var);
        s_add(&err->msg, raw ? " is empty" : " is not set");
        s_add(&err->msg, "): request ");
        s_add(&err->msg, p->resource);
        s_add(&err->msg, " in resources.limits");
        return cmk_fail(err, EXIT_NO_CPUS);
    }
    return parse_cpus_value(p->var, raw, cpus, &err->msg) ? cmk_fail(err, EXIT_MALFORMED) : 0;
}

static int check_allowed(const struct pinner_pool *p, const cpuset *cpus, const cpuset *allowed, cmk_error *err)
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
    s_add(&err->msg, count == 1 ? "CPU " : "CPUs ");
    s_ranges(&err->msg, &missing);
    s_add(&err->msg, " of the ");
    s_add(&err->msg, p->name);
    s_add(&err->msg, count == 1 ? " pool is" : " pool are");
    s_add(&err->msg, " not allowed in this container (allowed: ");
    s_ranges(&err->msg, allowed);
    s_add(&err->msg, ")");
    return cmk_fail(err, EXIT_NOT_ALLOWED);
}

/* ---- affinity ----------------------------------------------------------------
 *
 * The CPUs a container may use are its cpuset's, not the affinity it started with (docs/design/pinner.md: since
 * Linux 6.2 that may still be the runtime's). The kernel intersects every request with the cpuset, so
 * asking for all CPUs and reading back yields the cpuset.
 */

/* `what` and the errno as one message. */
static int affinity_error(const char *what, const cpuset *cpus, int e, cmk_error *err)
{
    s_add(&err->msg, what);
    if (cpus)
        s_ranges(&err->msg, cpus);
    s_add(&err->msg, ": ");
    s_errno(&err->msg, e);
    return cmk_fail(err, EXIT_AFFINITY);
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
static int cpuset_cpus(cpuset *allowed, cpuset *started, cmk_error *err)
{
    static cpuset all;
    if (get_affinity(started))
        return affinity_error("cannot read this process's allowed CPUs", NULL, errno, err);
    memset(&all, 0xff, sizeof all);
    if (set_affinity(&all)) {
        *allowed = *started;
        return 0;
    }
    if (get_affinity(allowed))
        return affinity_error("cannot read this process's allowed CPUs", NULL, errno, err);
    return 0;
}

/* Pin, then read back: a pin the kernel narrowed or moved (the cpuset changed under us) is refused. */
static int pin(const cpuset *cpus, cmk_error *err)
{
    static cpuset got;
    if (set_affinity(cpus) || get_affinity(&got))
        return affinity_error("cannot pin to CPUs ", cpus, errno, err);
    if (!memcmp(&got, cpus, sizeof got))
        return 0;
    s_add(&err->msg, "cannot pin to CPUs ");
    s_ranges(&err->msg, cpus);
    s_add(&err->msg, ": the kernel set CPUs ");
    s_ranges(&err->msg, &got);
    s_add(&err->msg, " (did the container's cpuset change?)");
    return cmk_fail(err, EXIT_AFFINITY);
}

/* ---- env and exec -------------------------------------------------------------- */

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
static int exec_command(const char *command, char **args, int nargs, cmk_error *err)
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
    s_shown(&err->msg, command);
    if (e == ENOENT || e == ENOTDIR) {
        if (where) {
            s_add(&err->msg, ": command not found (searched PATH=");
            s_shown(&err->msg, where);
            s_add(&err->msg, ")");
        } else {
            s_add(&err->msg, ": ");
            s_errno(&err->msg, e);
        }
        return cmk_fail(err, EXIT_NOT_FOUND);
    }
    s_add(&err->msg, ": cannot execute: ");
    s_errno(&err->msg, e);
    return cmk_fail(err, EXIT_NOT_EXECUTABLE);
}

int isolate(int argc, char **argv, cmk_error *err)
{
    struct request r;
    const struct pinner_pool *pool = NULL;
    static cpuset cpus, allowed, started;
    int status = parse_args(argc, argv, &r, err);
    if (status)
        return status;
    if (r.help)
        return write_all(1, HELP, sizeof HELP - 1) ? 1 : EXIT_HELP;
    if ((status = pool_cpus(r.pool, &pool, &cpus, err)) || (status = cpuset_cpus(&allowed, &started, err)) ||
        (status = check_allowed(pool, &cpus, &allowed, err)))
        return status;
    if (r.socket_id != -1 && pool->socket_aware) {
        const char *root = getenv(ENV_SYSFS_ROOT);
        if ((status = on_socket(pool, &cpus, r.socket_id, root && *root ? root : DEFAULT_SYSFS_ROOT, err)))
            return status;
    }
    if (!r.no_affinity) {
        if ((status = pin(&cpus, err)))
            return status;
    } else if (memcmp(&allowed, &started, sizeof allowed) && set_affinity(&started)) {
        /* the workload pins itself: give back the affinity it came with */
        return affinity_error("cannot restore this process's CPUs ", &started, errno, err);
    }
    set_assigned_env(&cpus);
    return exec_command(r.command, r.args, r.nargs, err);
}
