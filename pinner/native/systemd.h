/* The cgroups systemd owns on a node whose cgroup manager it is (runc/crun --systemd-cgroup, the kubelet's
 * `cgroupDriver: systemd`): the container's scope, the pod's slice, the sandbox's scope. systemd writes their
 * attribute files itself, from what it has recorded for the unit, at every daemon-reload, daemon-reexec and
 * SetUnitProperties (runc update, the kubelet's resizes); a value written only to the file is reset then
 * (AllowedCPUs unset: "", the whole parent; the quota runc sent at creation). So what the hook gives such a
 * cgroup is recorded with its owner first, through systemctl, and systemd's own re-applies keep it
 * (docs/design/hook.md, "A node whose cgroups systemd owns").
 */
#ifndef CMK_SYSTEMD_H
#define CMK_SYSTEMD_H

#include "cpulist.h"
#include "error.h"

/* Records, for the unit whose cgroup is path (in the hierarchy, as /proc/PID/cgroup names it), cpus as its
 * AllowedCPUs= (cpus NULL: left as they are) and, with unthrottle, no CPU quota (CPUQuota=), for the node's
 * run time (--runtime: gone with the unit or a reboot). Nothing happens where systemd is not PID 1, where
 * the path's last component names no scope or slice, or where systemd's unit of that name has another
 * cgroup (the cgroupfs driver's cgroups are nobody's but the runtime's). 0, or HOOK_EXIT_SYSTEMD with the
 * unit and systemctl's own line when systemd owns the cgroup and did not record it. */
int systemd_record(const char *path, const cpuset *cpus, int unthrottle, cmk_error *err);

#endif
