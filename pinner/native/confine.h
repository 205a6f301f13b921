/* The hook's escape fix (docs/design/hook.md, "The bound"): the container's cgroup narrowed to its CPUs, its
 * processes moved into HOOK_CONFINED_CGROUP below it, and the pod's cgroup narrowed to its containers' CPUs
 * (its sandbox confined first when the runtime names it), so nothing a process in the container does to its
 * cgroup reaches CPUs the pod was not given. Security-critical: tests/pinner/test_hook_escape.py and
 * tests/e2e/test_escape_podman.py hold its behaviour.
 */
#ifndef CMK_CONFINE_H
#define CMK_CONFINE_H

#include "cgroup.h"
#include "cpulist.h"
#include "error.h"

/* Confines process pid's cpuset cgroup cg (and what is below and above it, as said) to cpus; sandbox is the
 * pod sandbox's container ID, or NULL. 0, or the status. */
int confine_cgroup(const struct cgroup *cg, long pid, const cpuset *cpus, const char *sandbox, cmk_error *err);

#endif
