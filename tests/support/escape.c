/* The cgroup-namespace escape, as a root process inside a container would try it (issue 20).
 *
 * Makes a new user, mount and cgroup namespace, either with unshare(2) ("unshare") or with one raw
 * clone(2) ("clone", so that filtering unshare alone is not enough), mounts the cpuset hierarchy there
 * (v1's "cpuset" or the v2 unified tree: whatever /proc/self/mountinfo shows) whose root is the caller's
 * own cgroup, writes every online CPU to that root's cpuset.cpus, asks for every CPU with
 * sched_setaffinity(2), and prints one line:
 *
 *   escape: MODE ns=ok|ERRNO map=ok|ERRNO tmpfs=ok|ERRNO mount=ok|ERRNO write=ok|ERRNO affinity=LIST
 *
 * LIST is Cpus_allowed_list of the process that tried, read back after everything; the tests compare
 * it with the CPUs the container was given. Every step that fails is named with its errno and the next
 * steps still run (the affinity is always read), so a test sees exactly how far it got. Exit status 0
 * whatever happened: judging is the test's job. Built static (musl-gcc or gcc -static) so it runs in a
 * busybox image. Not product code: it lives with the tests.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MNT "/tmp"

static char result[512];

static const char *errname(int e)
{
    static const struct { int e; const char *name; } names[] = {
        {EPERM, "EPERM"}, {EACCES, "EACCES"}, {EINVAL, "EINVAL"}, {EROFS, "EROFS"}, {ENOENT, "ENOENT"},
        {EBUSY, "EBUSY"}, {ENOSPC, "ENOSPC"}, {ENOSYS, "ENOSYS"}, {EUSERS, "EUSERS"}, {ENODEV, "ENODEV"},
    };
    static char other[16];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].e == e)
            return names[i].name;
    snprintf(other, sizeof other, "E%d", e);
    return other;
}

static void note(const char *what, int err)
{
    size_t n = strlen(result);
    snprintf(result + n, sizeof result - n, " %s=%s", what, err ? errname(err) : "ok");
}

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return errno;
    ssize_t n = write(fd, text, strlen(text));
    int e = n < 0 ? errno : 0;
    close(fd);
    return e;
}

static int read_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return errno;
    ssize_t n = read(fd, buf, size - 1);
    int e = n < 0 ? errno : 0;
    close(fd);
    buf[n < 0 ? 0 : n] = 0;
    buf[strcspn(buf, "\n")] = 0;
    return e;
}

/* 1 if the cpuset controller is a v1 hierarchy here, 0 if it is in the v2 unified tree. */
static int cpuset_is_v1(void)
{
    char line[4096];
    FILE *f = fopen("/proc/self/mountinfo", "r");
    int v1 = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *sep = strstr(line, " - ");
        if (sep && !strncmp(sep, " - cgroup ", 10) && strstr(sep, "cpuset"))
            v1 = 1;
    }
    if (f)
        fclose(f);
    return v1;
}

/* In the new namespaces: map uid/gid 0 to ourselves, mount the hierarchy, widen its root. */
static void widen(int v1)
{
    char online[256] = "", path[128];
    write_file("/proc/self/setgroups", "deny");
    /* since Linux 5.12 mapping uid 0 needs CAP_SETFCAP where the namespace was made (--cap-drop ALL lacks it) */
    note("map", write_file("/proc/self/uid_map", "0 0 1"));
    write_file("/proc/self/gid_map", "0 0 1");
    int e = mount("none", MNT, "tmpfs", 0, NULL) ? errno : 0; /* a root file system may be read-only */
    note("tmpfs", e);
    if (!e) {
        e = mkdir(MNT "/h", 0700) ? errno : 0;
        if (!e)
            e = mount("cgroup", MNT "/h", v1 ? "cgroup" : "cgroup2", 0, v1 ? "cpuset" : NULL) ? errno : 0;
    }
    note("mount", e);
    read_file("/sys/devices/system/cpu/online", online, sizeof online);
    strcat(online, "\n");
    snprintf(path, sizeof path, "%s/h/cpuset.cpus", MNT);
    note("write", e ? e : write_file(path, online));
}

static void widen_affinity(void)
{
    cpu_set_t all;
    memset(&all, 0xff, sizeof all);
    sched_setaffinity(0, sizeof all, &all);
}

static void report(const char *mode)
{
    char line[512], allowed[256] = "?";
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18))
            snprintf(allowed, sizeof allowed, "%s", line + 18 + strspn(line + 18, " \t"));
    if (f)
        fclose(f);
    allowed[strcspn(allowed, "\n")] = 0;
    printf("escape: %s%s affinity=%s\n", mode, result, allowed);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "unshare";
    int v1 = cpuset_is_v1(), flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP;
    if (!strcmp(mode, "clone")) {
        long pid = syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, NULL);
        if (pid == 0) {
            note("ns", 0);
            widen(v1);
            widen_affinity();
            report(mode);
            _exit(0);
        }
        if (pid < 0) {
            note("ns", errno);
            widen_affinity();
            report(mode);
            return 0;
        }
        int status;
        waitpid((pid_t)pid, &status, 0);
        return 0;
    }
    int e = unshare(flags) ? errno : 0;
    note("ns", e);
    if (!e)
        widen(v1);
    widen_affinity();
    report(mode);
    return 0;
}
