/* The CPUs and quota of the cgroups systemd owns, recorded with systemd (systemd.h). */
#define _GNU_SOURCE
#include "systemd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmk_generated.h"

/* systemd's own test that it is the system manager (sd_booted): this directory exists while it is PID 1. */
static int systemd_is_manager(void)
{
    struct stat st;
    return !lstat(HOOK_SYSTEMD_RUNTIME_DIR, &st) && S_ISDIR(st.st_mode);
}

/* The unit a cgroup path's last component names, if it names a scope or a slice (systemd's cgroup of a unit
 * is always named after it); NULL otherwise, so the cgroupfs driver's cgroups cost nothing here. */
static const char *unit_of(const char *path)
{
    static const char *const kinds[] = {".scope", ".slice"};
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (n > strlen(kinds[i]) && !strcmp(name + n - strlen(kinds[i]), kinds[i]))
            return name;
    return NULL;
}

static long elapsed_ms(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

/* Runs args (argv[0] the binary's path) with stdin from /dev/null, its stdout and stderr onto out, for at
 * most HOOK_SYSTEMCTL_TIMEOUT_MS (then it is killed). 0 when it exited 0; -1 with the reason in why. */
static int run(const char *const *args, str *out, str *why)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) {
        s_add(why, "cannot make a pipe: ");
        s_errno(why, errno);
        return -1;
    }
    signal(SIGCHLD, SIG_DFL); /* a runtime that ignores it would have the child reaped before waitpid sees it */
    pid_t pid = fork();
    if (pid == 0) {
        static char *const env[] = {"LC_ALL=C", "SYSTEMD_COLORS=0", NULL};
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0 && dup2(null, 0) == 0 && dup2(fds[1], 1) == 1 && dup2(fds[1], 2) == 2)
            execve(args[0], (char *const *)args, env);
        _exit(127);
    }
    int e = errno;
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        s_add(why, "cannot start it: ");
        s_errno(why, e);
        return -1;
    }
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int timed_out = 0;
    for (;;) {
        long left = HOOK_SYSTEMCTL_TIMEOUT_MS - elapsed_ms(&start);
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int ready = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        timed_out = ready <= 0; /* no answer in time, or poll itself failed: stop waiting either way */
        char buf[4096];
        ssize_t n = ready > 0 ? read(fds[0], buf, sizeof buf) : 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (out->len < HOOK_MAX_JSON_BYTES)
            s_addn(out, buf, (size_t)n);
    }
    close(fds[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out) {
        s_addf(why, "no answer within %d s", HOOK_SYSTEMCTL_TIMEOUT_MS / 1000);
        return -1;
    }
    if (WIFEXITED(status) && !WEXITSTATUS(status))
        return 0;
    const char *text = out->p ? out->p : "";
    size_t line = strcspn(text, "\n");
    if (line)
        s_shown_n(why, text, line);
    else if (WIFEXITED(status))
        s_addf(why, "exit status %d", WEXITSTATUS(status));
    else
        s_addf(why, "killed by signal %d", WTERMSIG(status));
    return -1;
}

/* The value of `key=` in systemctl show's output (one key=value a line), or NULL; *n is its length. */
static const char *value_of(const str *out, const char *key, size_t *n)
{
    size_t k = strlen(key);
    for (const char *line = out->p; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len > k && !strncmp(line, key, k) && line[k] == '=') {
            *n = len - k - 1;
            return line + k + 1;
        }
        line = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static int refused(const char *what, const char *unit, const str *why, cmk_error *err)
{
    s_add(&err->msg, what);
    s_shown(&err->msg, unit);
    s_add(&err->msg, ", the owner of its cgroup: ");
    s_add(&err->msg, why->p ? why->p : "");
    s_add(&err->msg, " (" HOOK_SYSTEMD_HINT ")");
    return cmk_fail(err, HOOK_EXIT_SYSTEMD);
}

int systemd_record(const char *path, const cpuset *cpus, int unthrottle, cmk_error *err)
{
    static const char *const paths[] = {HOOK_SYSTEMCTL_PATHS};
    const char *unit = unit_of(path), *systemctl = NULL;
    if ((!cpus && !unthrottle) || !unit || !systemd_is_manager())
        return 0;
    for (size_t i = 0; !systemctl && i < sizeof paths / sizeof *paths; i++)
        systemctl = access(paths[i], X_OK) ? NULL : paths[i];
    str out = {0}, why = {0}, allowed = {0};
    if (!systemctl) {
        s_add(&why, "no systemctl at " HOOK_SYSTEMCTL_SHOWN);
        return refused("cannot ask systemd about ", unit, &why, err);
    }
    const char *show[] = {systemctl, "show", "--property=ControlGroup", "--property=AllowedCPUs",
                          "--property=CPUQuotaPerSecUSec", "--", unit, NULL};
    if (run(show, &out, &why))
        return refused("cannot ask systemd about ", unit, &why, err);
    size_t n = 0;
    const char *value = value_of(&out, "ControlGroup", &n);
    if (!value || n != strlen(path) || strncmp(value, path, n))
        return 0; /* no unit of that name, or its cgroup is elsewhere: this cgroup is not systemd's */
    cpuset recorded = {0};
    str detail = {0};
    value = value_of(&out, "AllowedCPUs", &n);
    int same_cpus = !cpus || (value && n && !parse_cpu_list(value, n, CPU_LIST_KERNEL, &recorded, &detail) &&
                              !memcmp(&recorded, cpus, sizeof recorded));
    value = value_of(&out, "CPUQuotaPerSecUSec", &n);
    int same_quota = !unthrottle || (value && n == strlen("infinity") && !strncmp(value, "infinity", n));
    free(detail.p);
    if (same_cpus && same_quota)
        return 0; /* an earlier cmk hook entry of this container recorded it */
    if (!same_cpus) {
        s_add(&allowed, "AllowedCPUs=");
        s_ranges(&allowed, cpus);
    }
    const char *set[] = {systemctl, "set-property", "--runtime", "--", unit,
                         same_cpus ? "CPUQuota=" : allowed.p, same_cpus || same_quota ? NULL : "CPUQuota=", NULL};
    out.len = 0;
    int status = run(set, &out, &why) ? refused("systemd did not record the CPUs of ", unit, &why, err) : 0;
    free(out.p);
    free(allowed.p);
    return status;
}
