"""What the systemd tier does and checks, shared by the guest program and the host-side tests.

Standard library and the pure cpu-list grammar only: the guest imports it with the root's own python3.

Each VM runs, for each runtime, two pods as containerd and the kubelet make
them with the systemd cgroup driver (a sandbox and one workload each): a
*pinned* container holding the exclusive CPU through the CDI hook, and an
*ordinary* one under the node-wide hook. After the start and after each of
systemd's rewrites (:data:`STEPS`) the guest records what each container
reaches; the host asserts each :data:`CHECKS` entry of each step on its own.
"""

from __future__ import annotations

from deviceplugin.model.cpulist import CpuListError, format_cpu_list, parse_cpu_list

#: The guest machine: 2 CPUs, the exclusive CPU 1 (a whole core's CDI device), the infra CPU 0.
VM_CPUS = 2
EXCLUSIVE = frozenset({1})
INFRA = frozenset({0})
#: Each kernel booted: bookworm's own 6.1 (systemd's reset of a populated cpuset fails with ENOSPC there) and
#: trixie-backports' 7.x (past 6.19, where that reset succeeds).
KERNELS = ("bookworm", "backports")
RUNTIMES = ("runc", "crun")
KINDS = {"pinned": EXCLUSIVE, "ordinary": INFRA}

#: The createRuntime hooks' timeout here. The CDI spec's and the hooks.d declaration's 10 s are for a real
#: machine; under TCG on a busy 2-CPU host one `systemctl` takes 1.5-2.5 s (measured: the set-property steps),
#: and the hook runs up to six (show + set-property for the scope, the pod slice and the sandbox scope), so 10 s
#: failed every runc start here. What each start took, hooks included, is in its record (run_seconds).
HOOK_TIMEOUT_UNDER_TCG = 90

#: In order; each is recorded on its own, after the start.
STEPS = (
    "start",               # sandbox + workload of each pod, `RUNTIME --systemd-cgroup run -d`
    "daemon-reload",       # systemctl daemon-reload: systemd re-applies every unit's cgroup context
    "daemon-reexec",       # systemctl daemon-reexec: the same after deserialising its state
    "slice-set-property",  # systemctl set-property --runtime <pod slice> CPUWeight=50 (the kubelet's pod update)
    "scope-set-property",  # systemctl set-property --runtime <scope> CPUWeight=50
    "update",              # RUNTIME update --memory 200M <id> (SetUnitProperties on the scope, as `crictl update`)
    "exec",                # a process exec'd later that asks for every CPU (taskset -p) before it reports
    "restart",             # delete + run again with the same config.json
    "escape",              # the node tier's escape: the attacker exec'd later (unshare, raw clone), and what it
)                          # reached at the restart's start (every start of the workload's script runs it)

#: Per container kind, what must hold after every step: the CPUs of the init process, the scope's effective
#: cpuset, the pod slice's effective cpuset (the bound of a process exec'd later), a newly exec'd process,
#: and for the pinned container (``--exclusive``) no CFS quota (cpu.max ``max ...``).
CHECKS = {
    "pinned": ("affinity", "scope_effective", "bound_effective", "exec", "cpu_max"),
    "ordinary": ("affinity", "scope_effective", "bound_effective", "exec"),
}
#: At the escape step, also: the CPUs each attack ended on (:mod:`tests.support.escape`).
ESCAPES = ("unshare_at_start", "clone_at_start", "unshare_exec", "clone_exec")
ESCAPE_STEP = "escape"

#: What each check reads from a container's observation, as the test's message names it.
SEEN = {
    "affinity": "Cpus_allowed_list of the container's init",
    "scope_effective": "the scope's cpuset.cpus.effective",
    "bound_effective": ("cpuset.cpus.effective of the container cgroup's parent, the bound of a process exec'd "
                        "later (the pod slice under runc, the scope under crun, which puts the container below it)"),
    "exec": "Cpus_allowed_list of a process exec'd into the container",
    "cpu_max": "cpu.max of the container's cgroup (the scope under runc, crun's 'container' subgroup of it)",
}


def show(cpus: frozenset[int]) -> str:
    return format_cpu_list(cpus) or "<none>"


def as_cpus(text: str) -> frozenset[int] | None:
    """The CPUs of a cpu list the guest read; None for what is not one ('<No such file ...>', '<exit 1>')."""
    try:
        return parse_cpu_list(text) if text else frozenset()
    except (CpuListError, ValueError):
        return None


def checks_of(kind: str, step: str) -> tuple[str, ...]:
    """The checks of ``kind``'s container after ``step``."""
    return CHECKS[kind] + (tuple(f"escape_{e}" for e in ESCAPES) if step == ESCAPE_STEP else ())


def pod_slice(uid: str) -> str:
    """A Guaranteed pod's slice with the systemd driver: ``kubepods-pod<uid>.slice`` (the uid's '-' as '_')."""
    return f"kubepods-pod{uid.replace('-', '_')}.slice"


def scope(container_id: str) -> str:
    """The scope runc and crun make for ``<slice>:cri-containerd:<id>``."""
    return f"cri-containerd-{container_id}.scope"


# -- the kubelet node (tests/systemd/kubelet_guest.py): containerd and the kubelet in the same VMs -------------

#: qemu's user network: the host's loopback as the guest reaches it, and the guest's own address there.
KUBE_GATEWAY = "10.0.2.2"
KUBE_GUEST_ADDRESS = "10.0.2.15/24"
#: The pods' subnet, on the guest's own bridge (nothing outside the VM sees it).
KUBE_POD_SUBNET = "10.213.9.0/24"
KUBE_NODE = "cmk-systemd-node"
#: The pods through the kubelet under policy none: deploy/examples' CDI-only seed pod on its exclusive core
#: (``pinned``), and one holding no cmk resource that the node-wide hook confines to infra (``ordinary``).
KUBE_KINDS = ("pinned", "ordinary")
#: Under the kubelet's static CPU manager, with the daemon still running: a Guaranteed pod of one whole CPU
#: (the kubelet picks it) and the ordinary pod again (on the kubelet's shared CPUs).
STATIC_KINDS = ("guaranteed", "ordinary")
#: In order, after both pods started ("start"); each is observed on its own.
KUBELET_STEPS = (
    "start",
    "daemon-reload",    # systemctl daemon-reload: systemd re-applies every unit's cgroup context
    "daemon-reexec",
    "resize",           # an in-place resize of each pod (memory of the pinned one, cpu of the ordinary one)
    "kubelet-restart",  # systemctl restart kubelet
    "rollout",          # kubectl rollout restart of the DaemonSet under the running pods
)
#: What must hold for each pod after each step (the names of :data:`SEEN`), plus for the pinned pod no quota.
KUBELET_CHECKS = {
    "pinned": ("affinity", "scope_effective", "bound_effective", "exec", "cpu_max"),
    "ordinary": ("affinity", "scope_effective", "bound_effective", "exec"),
}
