/* libFuzzer harness over the hook's parsers (issue 20): the static pinner's own units, compiled in.
 *
 * The first input byte picks the parser, the rest is its input, exactly as the hook meets it:
 *   0  config.json: the JSON parser, then the createRuntime entries as the node-wide hook reads them
 *   1  the OCI state on stdin: the JSON parser, then pid and bundle
 *   2  a cpu list, in both forms of the one parser (--cpus=; a cpuset file, the infra record's text)
 *   3  /proc/PID/cgroup
 *   4  /proc/self/mountinfo, for a v1 and a v2 cgroup
 *   5  the infra record file
 * File inputs are written to a scratch directory and read through the hook's own bounded reader. The
 * refusals are error values (error.h) the harness drops, and writes to stderr are dropped, so libFuzzer's
 * report is readable. The pinner allocates for one short-lived process and frees little, so every
 * allocation is recorded and what one input left is freed before the next: each stays a real malloc, so
 * ASan still sees overflows. Built and run by tests/pinner/test_fuzz_hook.py; seeds in corpus/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *fz_malloc(size_t n);
static void *fz_calloc(size_t n, size_t size);
static void *fz_realloc(void *p, size_t n);
static void fz_free(void *p);
static void fz_reset(void);
static long fz_write(int fd, const void *p, size_t n);

#define malloc fz_malloc
#define calloc fz_calloc
#define realloc fz_realloc
#define free fz_free
#define write fz_write
/* The units the hook's parsers live in (not main.c, isolate.c, sockets.c: the pinner's main and isolate). */
#include "strbuf.c"
#include "error.c"
#include "cpulist.c"
#include "files.c"
#include "json.c"
#include "cgroup.c"
#include "confine.c"
#include "systemd.c"
#include "hook.c"
#undef write
extern ssize_t write(int fd, const void *buf, size_t count); /* unistd.h declared it under the macro's name */
#undef malloc
#undef calloc
#undef realloc
#undef free

#define FZ_MAX_LIVE 65536
static void *live[FZ_MAX_LIVE];
static size_t nlive;

static void *fz_track(void *p)
{
    if (p && nlive < FZ_MAX_LIVE)
        live[nlive++] = p;
    return p;
}

static void fz_forget(void *p)
{
    for (size_t i = nlive; i-- > 0;)
        if (live[i] == p) {
            live[i] = live[--nlive];
            return;
        }
}

static void *fz_malloc(size_t n) { return fz_track(malloc(n)); }
static void *fz_calloc(size_t n, size_t size) { return fz_track(calloc(n, size)); }

static void *fz_realloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (q) {
        if (p)
            fz_forget(p);
        fz_track(q);
    }
    return q;
}

static void fz_free(void *p)
{
    if (p)
        fz_forget(p);
    free(p);
}

static void fz_reset(void)
{
    while (nlive)
        free(live[--nlive]);
}

/* The refusals' one line on stderr is dropped (libFuzzer reports there); any other fd is written. */
static long fz_write(int fd, const void *p, size_t n)
{
    return fd == 2 ? (long)n : (long)write(fd, p, n);
}

static char dir[64];

static void put(const char *name, const uint8_t *data, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, size, f);
        fclose(f);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(dir, sizeof dir, "/tmp/cmk-fuzz-hook-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    char path[128];
    snprintf(path, sizeof path, "%s/1", dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/self", dir);
    mkdir(path, 0700);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned which = data[0] % 6;
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    str text = {0};
    s_addn(&text, (const char *)in, n);
    jval value;
    struct cgroup cg = {0};
    cpuset cpus = {0};
    cmk_error err = {0}; /* its message is freed with the rest of the input's allocations */
    switch (which) {
    case 0: {
        static struct hook_entries entries;
        memset(&entries, 0, sizeof entries);
        if (!j_parse(&text, "config.json", &value, &err))
            hook_cpus(&value, "config.json", NULL, NULL, &entries, &err);
        break;
    }
    case 1: {
        struct hook_input hin = {0};
        if (!j_parse(&text, "the OCI state", &value, &err))
            hook_state(&value, &hin, &err);
        break;
    }
    case 2:
        parse_cpu_list(text.p, n, CPU_LIST_ENV, &cpus, &err.msg);
        parse_cpu_list(text.p, n, CPU_LIST_KERNEL, &cpus, &err.msg);
        break;
    case 3:
        put("1/cgroup", in, n);
        find_cgroup(dir, 1, "cpuset", &cg, &err);
        break;
    case 4:
        put("self/mountinfo", in, n);
        for (int v2 = 0; v2 < 2; v2++) {
            struct cgroup c = {.v2 = v2};
            s_add(&c.path, "/kubepods/pod1/ctr");
            find_mount(dir, 1, "cpuset", &c, &err);
        }
        break;
    case 5: {
        char path[128];
        snprintf(path, sizeof path, "%s/record", dir);
        put("record", in, n);
        infra_record(path, &cpus, &err);
        break;
    }
    }
    fz_reset();
    return 0;
}
