/* `cmk isolate --socket-id` (sockets.h). */
#define _GNU_SOURCE
#include "sockets.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmk_generated.h"
#include "files.h"

/* "cannot read WHAT from PATH: DETAIL (hint)", status 7; frees detail. */
static int sysfs_error(const char *what, const char *path, str *detail, cmk_error *err)
{
    s_add(&err->msg, "cannot read ");
    s_add(&err->msg, what);
    s_add(&err->msg, " from ");
    s_shown(&err->msg, path);
    s_add(&err->msg, ": ");
    s_addn(&err->msg, detail->p, detail->len);
    s_add(&err->msg, " (--socket-id needs sysfs; use --socket-id=-1 for any socket)");
    free(detail->p);
    *detail = (str){0};
    return cmk_fail(err, EXIT_SOCKET);
}

/* "the socket of CPU N", what a package read is for. */
static void socket_of(char *what, size_t n, unsigned cpu)
{
    snprintf(what, n, "the socket of CPU %u", cpu);
}

/* Reads a sysfs file of at most limit bytes into text; 0, 1 when missing_ok and it is not there, or the
 * error status. */
static int read_sysfs_text(const char *what, const char *path, size_t limit, int missing_ok, str *text,
                           cmk_error *err)
{
    size_t raw_len = 0;
    str detail = {0};
    int e = read_sysfs(path, limit + 1, text, &raw_len);
    if (e && missing_ok && (e == ENOENT || e == ENOTDIR))
        return 1;
    if (e) {
        s_errno(&detail, e);
        return sysfs_error(what, path, &detail, err);
    }
    if (raw_len > limit) {
        s_addf(&detail, "longer than %zu bytes", limit);
        return sysfs_error(what, path, &detail, err);
    }
    return 0;
}

/* "'TEXT' is not KIND" as the detail of a sysfs error. */
static int sysfs_text_error(const char *what, const char *path, const char *text, const char *kind, cmk_error *err)
{
    str detail = {0};
    s_add(&detail, "'");
    s_shown(&detail, text);
    s_add(&detail, "' is not ");
    s_add(&detail, kind);
    return sysfs_error(what, path, &detail, err);
}

/* A physical_package_id's text; -1 (any negative) means the kernel does not know it. */
static int parse_package(const char *what, const char *path, const char *t, long *package, cmk_error *err)
{
    const char *digits = *t == '-' ? t + 1 : t;
    size_t n = strlen(digits);
    if (n > 9 || !is_digits(digits, n))
        return sysfs_text_error(what, path, t, "a number", err);
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

static int read_package(const char *root, unsigned cpu, long *package, cmk_error *err)
{
    str path = {0}, text = {0};
    char what[40];
    socket_of(what, sizeof what, cpu);
    topology_path(&path, root, cpu, "physical_package_id");
    size_t raw_len = 0;
    int status, e = read_sysfs(path.p, MAX_NUMBER_FILE_BYTES, &text, &raw_len); /* no longer than a number */
    if (e) {
        str detail = {0};
        s_errno(&detail, e);
        status = sysfs_error(what, path.p, &detail, err);
    } else {
        status = parse_package(what, path.p, text.p, package, err);
    }
    free(path.p);
    free(text.p);
    return status;
}

/* A cleaned sysfs cpu list (0-3,8), or with mask a hex mask (0000ff0f,00000000), into set. */
static int parse_sysfs_text(const char *what, const char *path, const char *text, int mask, cpuset *set,
                            cmk_error *err)
{
    str detail = {0};
    memset(set, 0, sizeof *set);
    if (!*text)
        return 0;
    int bad = mask ? parse_cpu_mask(text, set) : parse_cpu_list(text, strlen(text), CPU_LIST_KERNEL, set, &detail);
    free(detail.p);
    return bad ? sysfs_text_error(what, path, text, mask ? "a cpu mask" : "a cpu list", err) : 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return !stat(path, &st) && S_ISDIR(st.st_mode);
}

/* The online CPUs, as the daemon finds them: cpu/online, else each cpuN/online flag, else every cpuN
 * with a topology folder (old kernels and machine dumps have no online file). */
static int online_cpus(const char *root, cpuset *online, cmk_error *err)
{
    static const char what[] = "the online CPUs";
    str dir = {0}, path = {0}, text = {0};
    s_add(&dir, root);
    s_add(&dir, "/devices/system/cpu");
    s_addf(&path, "%s/online", dir.p);
    int status = read_sysfs_text(what, path.p, MAX_LIST_FILE_BYTES, 1, &text, err);
    if (status > 1 || (status == 0 && (status = parse_sysfs_text(what, path.p, text.p, 0, online, err))))
        return status;
    if (!cs_empty(online))
        return 0;
    DIR *d = opendir(dir.p);
    if (!d) {
        str detail = {0};
        s_errno(&detail, errno);
        return sysfs_error(what, dir.p, &detail, err);
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
        if ((status = read_sysfs_text(what, path.p, MAX_NUMBER_FILE_BYTES, 1, &text, err)) > 1) {
            closedir(d);
            return status;
        }
        int flag = status == 0 && text.len;
        if (flag && strcmp(text.p, "0") && strcmp(text.p, "1")) {
            closedir(d);
            return sysfs_text_error(what, path.p, text.p, "0 or 1", err);
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

/* One package the kernel gave no id, as deviceplugin/model/packages.py's number_packages keys it. */
struct package_group {
    cpuset members;
    unsigned long hash;
    long number;
};

static const char *const PACKAGE_LIST_FILES[] = {
#define PACKAGE_FILE(name) name,
    CMK_PACKAGE_LIST_FILES(PACKAGE_FILE)
#undef PACKAGE_FILE
};

/* The CPUs CPU c shares a package with, from the first of PACKAGE_LIST_FILES there; 1 if none is. */
static int package_members(const char *root, unsigned c, cpuset *members, cmk_error *err)
{
    str path = {0}, text = {0};
    char what[40];
    int status = 1;
    socket_of(what, sizeof what, c);
    for (size_t f = 0; f < sizeof PACKAGE_LIST_FILES / sizeof PACKAGE_LIST_FILES[0] && status == 1; f++) {
        topology_path(&path, root, c, PACKAGE_LIST_FILES[f]);
        text.len = 0;
        if ((status = read_sysfs_text(what, path.p, MAX_LIST_FILE_BYTES, 1, &text, err)) > 1 ||
            (status == 0 && (status = parse_sysfs_text(what, path.p, text.p,
                                                       !strstr(PACKAGE_LIST_FILES[f], "_list"), members, err))))
            break;
    }
    free(path.p);
    free(text.p);
    return status;
}

/* derived[cpu]: every online CPU's package number where the kernel gives -1 (else -1), numbered as
 * deviceplugin/model/packages.py's number_packages does: a package one of its CPUs has an id for keeps the lowest
 * such id; the others are numbered after the known ids, in the order of their lowest CPU. The rule is written
 * twice on purpose (docs/dev/layout.md): this binary runs where there is no Python to import it from, and
 * tests/pinner/test_isolate_sockets.py checks the two agree on every dump. */
static int derived_packages(const char *root, long *derived, cmk_error *err)
{
    static cpuset online, members;
    static long known[MAX_CPUS];
    struct package_group *groups = NULL;
    size_t ngroups = 0, cap = 0;
    str path = {0}, text = {0};
    char what[40];
    long next_id = 0;
    int status = online_cpus(root, &online, err);
    if (status)
        return status;
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        known[c] = derived[c] = -1;
        if (!cs_has(&online, c))
            continue;
        socket_of(what, sizeof what, c);
        topology_path(&path, root, c, "physical_package_id");
        text.len = 0;
        if ((status = read_sysfs_text(what, path.p, MAX_NUMBER_FILE_BYTES, 1, &text, err)) > 1 ||
            (status == 0 && (status = parse_package(what, path.p, text.p, &known[c], err))))
            return status;
        if (known[c] >= next_id)
            next_id = known[c] + 1;
    }
    free(path.p);
    free(text.p);
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        if (!cs_has(&online, c) || known[c] >= 0)
            continue;
        status = package_members(root, c, &members, err);
        if (status > 1)
            return status;
        if (status == 1 || cs_empty(&members))
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
    return 0;
}

/* "none of the POOL pool's CPUs (LIST) is on socket N (they are on socket A,B): ...". */
static int on_no_socket(const struct pinner_pool *p, const cpuset *cpus, long socket_id, const long *packages,
                        size_t npackages, cmk_error *err)
{
    s_add(&err->msg, "none of the ");
    s_add(&err->msg, p->name);
    s_add(&err->msg, " pool's CPUs (");
    s_ranges(&err->msg, cpus);
    s_addf(&err->msg, ") is on socket %ld (they are on socket ", socket_id);
    for (size_t i = 0; i < npackages; i++)
        s_addf(&err->msg, i ? ",%ld" : "%ld", packages[i]);
    s_add(&err->msg, "): use one of those with --socket-id, or -1 for any");
    return cmk_fail(err, EXIT_SOCKET);
}

int on_socket(const struct pinner_pool *p, cpuset *cpus, long socket_id, const char *root, cmk_error *err)
{
    long packages[64];
    size_t npackages = 0;
    cpuset kept = {0};
    int any = 0;
    static long ids[MAX_CPUS], derived[MAX_CPUS];
    int unknown = 0;
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        int status = cs_has(cpus, c) ? read_package(root, c, &ids[c], err) : 0;
        if (status)
            return status;
        unknown |= cs_has(cpus, c) && ids[c] == -1;
    }
    int status = unknown ? derived_packages(root, derived, err) : 0;
    if (status)
        return status;
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        if (!cs_has(cpus, c))
            continue;
        long package = ids[c] == -1 ? derived[c] : ids[c];
        if (package == -1) {
            str path = {0}, detail = {0};
            char what[40];
            socket_of(what, sizeof what, c);
            topology_path(&path, root, c, "physical_package_id");
            s_add(&detail, UNKNOWN_PACKAGE_TEXT);
            return sysfs_error(what, path.p, &detail, err);
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
    if (!any)
        return on_no_socket(p, cpus, socket_id, packages, npackages, err);
    *cpus = kept;
    return 0;
}
