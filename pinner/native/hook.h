/* `cmk hook`: the OCI createRuntime hook the CDI spec adds (docs/design/hook.md says why that stage and what it
 * does; deviceplugin/model/pinnercontract.py holds its exit statuses). It reads the OCI state on stdin and the container's
 * config.json, takes the CPUs only from OCI hooks (its own --cpus and every `cmk hook` entry of
 * hooks.createRuntime: a pod spec can set env, never a hook), confines the container's cgroup (confine.h)
 * and pins its tasks.
 */
#ifndef CMK_HOOK_H
#define CMK_HOOK_H

#include <stddef.h>

#include "cpulist.h"
#include "error.h"
#include "json.h"

struct hook_opts {
    const char *proc_root, *cgroup_root, *cpus, *node_wide;
    int help, exclusive;
};

struct hook_input {
    long pid;
    const char *bundle;
};

/* What the `cmk hook --cpus` entries of a container's config.json say. */
struct hook_entries {
    cpuset cpus; /* the union of their --cpus */
    int count, exclusive; /* how many there are, and how many of them are marked --exclusive */
};

/* The pid and bundle of the OCI state; 0, or HOOK_EXIT_STATE. */
int hook_state(const jval *state, struct hook_input *in, cmk_error *err);
/* The union of the --cpus of every `cmk hook` createRuntime entry in config; own (unless NULL: the
 * node-wide hook) must be one of them. */
int hook_cpus(const jval *config, const char *path, const cpuset *own, const char *own_text,
              struct hook_entries *found_entries, cmk_error *err);
/* The infra pool's CPUs from the node-local record the daemon and `cmk install` write (atomically) into
 * cpus: 0; -1 if there is no record yet; else the status. */
int infra_record(const char *path, cpuset *cpus, cmk_error *err);
/* Runs `cmk hook ARGS` (argv after "hook"); the exit status, with the message in err. */
int hook(int argc, char **argv, cmk_error *err);

#endif
