/* `cmk hook` (hook.h): its options, its input, the CPUs its entries name, and the run. */
#define _GNU_SOURCE
#include "hook.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cgroup.h"
#include "cmk_generated.h"
#include "confine.h"
#include "files.h"

/* Parses cmk hook's options (argv after "hook", or a config entry's args after "cmk hook");
 * 0, or -1 with the problem in err->msg (the caller picks the status); `unknown_hint` follows an unknown option or argument. */
static int parse_hook_opts(size_t argc, char *const *argv, struct hook_opts *o, const char *unknown_hint,
                           cmk_error *err)
{
    for (size_t i = 0; i < argc; i++) {
        const char *t = argv[i];
        if (!strcmp(t, "-h") || !strcmp(t, "--help")) {
            o->help = 1;
            return 0;
        }
        if (!strcmp(t, HOOK_EXCLUSIVE_OPTION)) {
            if (o->exclusive) {
                s_add(&err->msg, "option " HOOK_EXCLUSIVE_OPTION " is given twice");
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
            s_add(&err->msg, t[0] == '-' ? "unknown option '" : "unexpected argument '");
            s_shown_n(&err->msg, t, t[0] == '-' ? nlen : strlen(t));
            s_add(&err->msg, "'");
            s_add(&err->msg, unknown_hint);
            return -1;
        }
        if (!eq && i + 1 >= argc) {
            s_add(&err->msg, "option ");
            s_addn(&err->msg, t, nlen);
            s_add(&err->msg, " needs a value");
            return -1;
        }
        if (*target) {
            s_add(&err->msg, "option ");
            s_addn(&err->msg, t, nlen);
            s_add(&err->msg, " is given twice");
            return -1;
        }
        *target = eq ? eq + 1 : argv[++i];
    }
    return 0;
}

int hook_state(const jval *state, struct hook_input *in, cmk_error *err)
{
    static const char where[] = "the OCI state on stdin";
    if (state->type != J_OBJECT) {
        s_addf(&err->msg, "%s is %s, not an object", where, JTYPE_NAMES[state->type]);
        s_add(&err->msg, " (cmk hook runs as an OCI createRuntime hook; the runtime writes the state)");
        return cmk_fail(err, HOOK_EXIT_STATE);
    }
    const jval *pid = j_get(state, "pid"), *bundle = j_get(state, "bundle");
    if (!pid || (pid->type == J_NUMBER && !strcmp(pid->text, "0"))) {
        s_addf(&err->msg, "%s has no \"pid\": run cmk hook at createRuntime, once the container's process exists", where);
        return cmk_fail(err, HOOK_EXIT_STATE);
    }
    if (pid->type != J_NUMBER || pid->len > 9 || !is_digits(pid->text, pid->len)) {
        s_addf(&err->msg, "\"pid\" in %s is not a process ID: ", where);
        if (pid->type == J_NUMBER || pid->type == J_BOOL || pid->type == J_NULL)
            s_shown_n(&err->msg, pid->text, pid->len);
        else
            s_add(&err->msg, JTYPE_NAMES[pid->type]);
        return cmk_fail(err, HOOK_EXIT_STATE);
    }
    in->pid = strtol(pid->text, NULL, 10);
    if (!bundle || bundle->type != J_STRING || !bundle->len || memchr(bundle->text, 0, bundle->len)) {
        s_addf(&err->msg, "%s has no \"bundle\" directory (the container's config.json is read from it)", where);
        return cmk_fail(err, HOOK_EXIT_STATE);
    }
    in->bundle = bundle->text;
    return 0;
}

/* "the container's config PATH" + what, as the start of the message. */
static void config_where(const char *path, const char *what, cmk_error *err)
{
    s_add(&err->msg, "the container's config ");
    s_shown(&err->msg, path);
    s_add(&err->msg, what);
}

static int config_error(const char *path, const char *what, cmk_error *err)
{
    config_where(path, what, err);
    return cmk_fail(err, HOOK_EXIT_CONFIG);
}

/* A --cpus value into cpus; 0, or HOOK_EXIT_MALFORMED. `where` prefixes the message. */
static int trusted_cpus(const char *raw, const char *where, cpuset *cpus, cmk_error *err)
{
    str detail = {0};
    if (!parse_cpus_value(HOOK_CPUS_OPTION, raw, cpus, &detail))
        return 0;
    s_add(&err->msg, where);
    s_addn(&err->msg, detail.p, detail.len);
    free(detail.p);
    return cmk_fail(err, HOOK_EXIT_MALFORMED);
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

/* The union of the --cpus of every `cmk hook` createRuntime entry in config; own (unless NULL: the
 * node-wide hook) must be one of them. */
int hook_cpus(const jval *config, const char *path, const cpuset *own, const char *own_text,
              struct hook_entries *found_entries, cmk_error *err)
{
    if (config->type != J_OBJECT)
        return config_error(path, " is not an object", err);
    const jval *hooks = j_get(config, "hooks");
    const jval *list = hooks && hooks->type == J_OBJECT ? j_get(hooks, "createRuntime") : NULL;
    if (hooks && hooks->type != J_OBJECT && hooks->type != J_NULL)
        return config_error(path, ": hooks is not an object", err);
    if (list && list->type != J_ARRAY && list->type != J_NULL)
        return config_error(path, ": hooks.createRuntime is not an array", err);
    int found = 0;
    for (size_t i = 0; list && list->type == J_ARRAY && i < list->count; i++) {
        const jval *entry = &list->items[i], *args = j_get(entry, "args");
        if (entry->type != J_OBJECT || (args && args->type != J_ARRAY && args->type != J_NULL)) {
            config_where(path, "", err);
            if (entry->type != J_OBJECT)
                s_addf(&err->msg, ": hooks.createRuntime[%zu] is not an object", i);
            else
                s_addf(&err->msg, ": hooks.createRuntime[%zu].args is not an array", i);
            return cmk_fail(err, HOOK_EXIT_CONFIG);
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
                s_add(&err->msg, where.p);
                if (a->type == J_STRING)
                    s_addf(&err->msg, "args[%zu] holds a NUL byte", k);
                else
                    s_addf(&err->msg, "args[%zu] is %s, not a string", k, JTYPE_NAMES[a->type]);
                return cmk_fail(err, HOOK_EXIT_MALFORMED);
            }
            argv[k - 2] = a->text;
        }
        struct hook_opts o = {0};
        cmk_error detail = {0};
        if (parse_hook_opts(args->count - 2, argv, &o, "", &detail) || o.help) {
            s_add(&err->msg, where.p);
            s_addn(&err->msg, detail.msg.p, detail.msg.len);
            if (o.help)
                s_add(&err->msg, "'--help' is not an option of a hook entry");
            return cmk_fail(err, HOOK_EXIT_MALFORMED);
        }
        cmk_error_free(&detail);
        free(argv);
        if (!o.cpus)
            continue; /* a cmk hook without CPUs adds none (it refuses to run itself) */
        cpuset entry_cpus = {0};
        int status = trusted_cpus(o.cpus, where.p, &entry_cpus, err);
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
    s_add(&err->msg, "this hook's " HOOK_CPUS_OPTION "=");
    s_shown(&err->msg, own_text);
    s_add(&err->msg, " is not in the createRuntime hooks of the container's config ");
    s_shown(&err->msg, path);
    s_add(&err->msg, ": the runtime runs the hooks it wrote there; " HOOK_NO_CPUS_HINT);
    return cmk_fail(err, HOOK_EXIT_NO_CPUS);
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

/* Whether the OCI spec names the container's CPUs (linux.resources.cpu.cpus): the kubelet's static CPU
 * manager does for every container it places, policy none for none. The node-wide hook leaves those as
 * they were made: the kubelet keeps rewriting them, and confining them to infra would fight it. */
static int runtime_chose_cpus(const jval *config)
{
    const jval *v = config;
    static const char *const path[] = {"linux", "resources", "cpu", "cpus"};
    for (size_t i = 0; v && i < sizeof path / sizeof *path; i++)
        v = v->type == J_OBJECT ? j_get(v, path[i]) : NULL;
    return v && v->type == J_STRING && !is_blank(v->text, v->len);
}

/* ---- hook: affinity and the command ------------------------------------------ */

/* Pins the init process, then every other task of it present (a thread that exited meanwhile is fine). */
static int confine_tasks(const char *proc_root, long pid, const cpuset *cpus, cmk_error *err)
{
    if (syscall(SYS_sched_setaffinity, (pid_t)pid, sizeof *cpus, cpus) < 0) {
        int e = errno;
        if (e == ESRCH) {
            s_addf(&err->msg, "the container's process %ld is gone: it exited before its start hook ran", pid);
            return cmk_fail(err, HOOK_EXIT_GONE);
        }
        s_addf(&err->msg, "cannot pin the container's process %ld to CPUs ", pid);
        s_ranges(&err->msg, cpus);
        s_add(&err->msg, ": ");
        s_errno(&err->msg, e);
        return cmk_fail(err, HOOK_EXIT_AFFINITY);
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
            s_addf(&err->msg, "cannot pin thread %ld of the container's process %ld to CPUs ", tid, pid);
            s_ranges(&err->msg, cpus);
            s_add(&err->msg, ": ");
            s_errno(&err->msg, e);
            return cmk_fail(err, HOOK_EXIT_AFFINITY);
        }
    }
    closedir(dir);
    return 0;
}

/* Why a bounded read (read_all) failed: its errno, or that the input passed HOOK_MAX_JSON_BYTES. */
static void s_read_errno(str *s, int e)
{
    if (e == EFBIG)
        s_addf(s, "it is larger than %d bytes", HOOK_MAX_JSON_BYTES);
    else
        s_errno(s, e);
}

/* The infra pool's CPUs from the node-local record the daemon and `cmk install` write (atomically) into
 * cpus: 0; -1 if there is no record yet; else the status. */
int infra_record(const char *path, cpuset *cpus, cmk_error *err)
{
    str text = {0};
    int e = read_file(path, &text);
    if (e == ENOENT)
        return -1;
    if (e) {
        s_add(&err->msg, "cannot read the node's infra record ");
        s_shown(&err->msg, path);
        s_add(&err->msg, ": ");
        s_read_errno(&err->msg, e);
        s_add(&err->msg, ": " HOOK_RECORD_HINT);
        return cmk_fail(err, HOOK_EXIT_RECORD);
    }
    if (is_blank(text.p, text.len) || cpus_of_text(&text, cpus)) {
        s_add(&err->msg, "the node's infra record ");
        s_shown(&err->msg, path);
        s_add(&err->msg, " holds '");
        s_shown_n(&err->msg, text.p, text.len > 64 ? 64 : text.len);
        s_add(&err->msg, "', not a cpu list: " HOOK_RECORD_HINT);
        return cmk_fail(err, HOOK_EXIT_RECORD);
    }
    return 0;
}

static int hook_usage(cmk_error *err)
{
    s_add(&err->msg, " (see '" HOOK_PROG " --help')");
    return cmk_fail(err, HOOK_EXIT_USAGE);
}

int hook(int argc, char **argv, cmk_error *err)
{
    struct hook_opts o = {0};
    static cpuset own;
    if (parse_hook_opts((size_t)argc, argv, &o, ": the OCI state comes on stdin", err))
        return hook_usage(err);
    if (o.help)
        return write_all(1, HOOK_HELP, sizeof HOOK_HELP - 1) ? 1 : HOOK_EXIT_OK;
    const char *proc_root = o.proc_root ? o.proc_root : HOOK_DEFAULT_PROC_ROOT, *cgroup_root = o.cgroup_root;
    if (o.node_wide && (o.cpus || o.exclusive || !*o.node_wide)) {
        s_add(&err->msg, o.cpus || o.exclusive ? HOOK_NODE_WIDE_OPTION " takes no " HOOK_CPUS_OPTION " or " HOOK_EXCLUSIVE_OPTION
                                          : HOOK_NODE_WIDE_OPTION " needs the infra record's path");
        s_add(&err->msg, ": the node-wide hook takes them from the container's cmk hook entries");
        return hook_usage(err);
    }
    if (!o.cpus && !o.node_wide) {
        s_add(&err->msg, "no " HOOK_CPUS_OPTION "=LIST: " HOOK_NO_CPUS_HINT);
        return cmk_fail(err, HOOK_EXIT_NO_CPUS);
    }
    int status;
    if (o.cpus && (status = trusted_cpus(o.cpus, "this hook's ", &own, err)))
        return status;

    str input = {0}, config_text = {0}, config_path = {0};
    jval state, config;
    struct hook_input in = {0};
    int e = read_all(0, &input);
    if (e) {
        s_add(&err->msg, "cannot read the OCI state on stdin: ");
        s_read_errno(&err->msg, e);
        return cmk_fail(err, HOOK_EXIT_STATE);
    }
    if (j_parse(&input, "the OCI state on stdin", &state, err))
        return cmk_fail(err, HOOK_EXIT_STATE);
    if ((status = hook_state(&state, &in, err)))
        return status;
    s_add(&config_path, in.bundle);
    s_add(&config_path, "/config.json");
    e = read_file(config_path.p, &config_text);
    if (e) {
        s_add(&err->msg, "cannot read the container's config ");
        s_shown(&err->msg, config_path.p);
        s_add(&err->msg, ": ");
        s_read_errno(&err->msg, e);
        return cmk_fail(err, HOOK_EXIT_CONFIG);
    }
    str what = {0};
    s_add(&what, "the container's config ");
    s_shown(&what, config_path.p);
    if (j_parse(&config_text, what.p, &config, err))
        return cmk_fail(err, HOOK_EXIT_CONFIG);
    static struct hook_entries entries;
    if ((status = hook_cpus(&config, config_path.p, o.node_wide ? NULL : &own, o.cpus, &entries, err)))
        return status;
    if (!entries.count) {
        if (runtime_chose_cpus(&config))
            return HOOK_EXIT_OK; /* the kubelet's CPU manager placed it: not ours to move */
        if ((status = infra_record(o.node_wide, &entries.cpus, err)))
            return status < 0 ? HOOK_EXIT_OK : status; /* no record yet: the container starts as it was created */
    }

    struct cgroup cg = {0};
    if ((status = find_cgroup(proc_root, in.pid, "cpuset", &cg, err)))
        return status;
    if (cgroup_root) {
        s_add(&cg.dir, cgroup_root);
        s_add(&cg.dir, !strcmp(cg.path.p, "/") ? "" : cg.path.p);
    } else if ((status = find_mount(proc_root, in.pid, "cpuset", &cg, err))) {
        return status;
    }
    container_cgroup(&cg);
    if ((status = confine_cgroup(&cg, in.pid, &entries.cpus, sandbox_id(&config), err)) ||
        (status = confine_tasks(proc_root, in.pid, &entries.cpus, err)))
        return status;
    if (entries.count && entries.exclusive == entries.count)
        return remove_quota(proc_root, in.pid, &cg, err);
    return HOOK_EXIT_OK;
}
