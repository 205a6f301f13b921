"""What a node needs outside Kubernetes for its pools: kernel line, kubelet settings, systemd drop-ins.

Pure: a function of the topology, the pool flags and what the node's cgroups were seen to be (no I/O);
``cmk host-config`` prints it.

Why it works this way: ``docs/design/host-config.md``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from deviceplugin.errors import CmkError
from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.node import NodePlan, plan_node
from deviceplugin.model.plan import PlanOptions, Pool, PoolPlan
from deviceplugin.model.topology import Topology

#: systemd drop-in file name: sorts after distribution defaults, names its origin.
DROPIN_NAME = "50-cmk-cpu-pools.conf"

#: Container runtime services and their unit names.
RUNTIMES = {"containerd": "containerd.service", "crio": "crio.service"}

#: The hooks.d directory podman reads by default besides /usr/share/containers/oci/hooks.d; CRI-O is told to.
DEFAULT_HOOKS_DIR = "/etc/containers/oci/hooks.d"
#: CRI-O's own default ``hooks_dir`` (``pkg/config``): kept in the list we print, so its hooks still run.
CRIO_DEFAULT_HOOKS_DIR = "/usr/share/containers/oci/hooks.d"
#: The full OCI spec a containerd runtime handler starts every container from, with the hook added.
CONTAINERD_BASE_SPEC = "/etc/containerd/cmk-base-spec.json"

#: Host cgroup slices whose processes stay on infra (kubepods.slice is the kubelet's: not touched).
HOST_SLICES = ("system.slice", "user.slice")

#: CRI-O drop-in naming its cgroup manager, the kubelet's cgroupDriver (beside the node-wide hook's drop-in).
CRIO_CGROUP_DROPIN = "/etc/crio/crio.conf.d/90-cmk-cgroup-driver.conf"


@dataclass(frozen=True, kw_only=True)
class NodeCgroups:
    """What the node's cgroups were seen to be: whether systemd is the init, and the cgroup version it boots."""

    #: systemd is PID 1 (its ``sd_booted`` test: ``/run/systemd/system`` exists).
    systemd: bool = False
    #: 2: the unified hierarchy (``cgroup.controllers`` at ``/sys/fs/cgroup``); 1: cgroup v1 or hybrid;
    #: None: no cgroup mount seen (a dump of sysfs without ``fs/cgroup``).
    version: int | None = None

    @property
    def driver(self) -> str:
        """The cgroup driver the kubelet and the runtime must both use: systemd's only with systemd on cgroup v2."""
        return "systemd" if self.systemd and self.version == 2 else "cgroupfs"

    @property
    def seen(self) -> str:
        """Why that driver, in a few words."""
        init = "systemd is the init" if self.systemd else "systemd is not the init"
        cgroup = {1: "cgroup v1", 2: "cgroup v2"}.get(self.version or 0, "no cgroup mount seen")
        return f"{init}, {cgroup}"


@dataclass(frozen=True, kw_only=True)
class HostOptions:
    """What to print beyond isolcpus: the optional kernel parameters, the reservation, the runtimes."""

    nohz_full: bool = False
    rcu_nocbs: bool = False
    irqaffinity: bool = False
    reserved_cores: int = 1
    runtimes: tuple[str, ...] = tuple(RUNTIMES)
    #: Where ``cmk install`` puts the binary and the infra record, and the hooks.d directory it writes into.
    install_dir: str = "/opt/bin"
    hooks_dir: str = DEFAULT_HOOKS_DIR


@dataclass(frozen=True)
class DropIn:
    path: str
    content: str


@dataclass(frozen=True)
class HostConfig:
    """The node's target settings and how its current boot differs from them."""

    plan: PoolPlan
    isolate: frozenset[int]
    infra: frozenset[int]
    reserved: frozenset[int]
    online: frozenset[int]
    current_isolated: frozenset[int]
    kernel_args: tuple[str, ...]
    kubelet: dict[str, Any]
    dropins: tuple[DropIn, ...]
    #: What each runtime's configuration needs so the node-wide hook runs for every container.
    runtime_config: tuple[DropIn, ...]
    #: Optional kernel settings that narrow what a root container may try (a second wall, not the bound).
    sysctls: tuple[DropIn, ...]
    notes: tuple[str, ...]
    cgroups: NodeCgroups
    #: Each runtime's cgroup driver, the same as the kubelet's ``cgroupDriver``.
    cgroup_driver_config: tuple[DropIn, ...]

    @property
    def reboot_needed(self) -> bool:
        return self.current_isolated != self.isolate


def target_plan(topology: Topology, options: PlanOptions) -> PoolPlan:
    """The pool plan the node gets once booted with the right isolcpus: planned as if nothing were isolated."""
    return plan_node(dataclasses.replace(topology, isolated=frozenset()), options).plan


def host_config_disagreement(node: NodePlan, options: PlanOptions) -> list[str]:
    """A note when ``cmk describe`` plans other CPUs than ``cmk host-config`` with the same flags; else none.

    They differ exactly when the node is not booted with host-config's ``isolcpus=`` line (e.g. the
    xeon_d dump, booted with isolcpus=0-3,8-11 where host-config keeps core 0 for the host).
    """
    topology = node.topology
    booted, target = node.plan, target_plan(topology, options)
    if all(booted.cpus(pool) == target.cpus(pool) for pool in Pool):
        return []
    wanted = format_cpu_list(target.cpus(Pool.EXCLUSIVE) | target.cpus(Pool.SHARED))
    pools = "; ".join(f"{pool} {format_cpu_list(target.cpus(pool))}" for pool in Pool if target.cpus(pool))
    current = format_cpu_list(topology.isolated & topology.online) or "(none)"
    return [(f"cmk host-config with these flags plans other CPUs ({pools}): this node is booted with "
            f"isolcpus={current}, host-config's line is isolcpus={wanted or '(none)'}; the two agree once it boots "
            "with host-config's kernel line")]


def _systemd_cpus(cpus: Iterable[int]) -> str:
    """systemd's CPU list syntax: ranges separated by spaces (it also takes commas; spaces read better)."""
    return format_cpu_list(cpus).replace(",", " ")


def _dropins(infra: frozenset[int], runtimes: Iterable[str]) -> tuple[DropIn, ...]:
    cpus = _systemd_cpus(infra)
    header = "# Written from `cmk host-config`: keep host processes on the infra CPUs.\n"
    dropins = [
        DropIn(f"/etc/systemd/system.conf.d/{DROPIN_NAME}",
               f"{header}# PID 1's affinity, inherited by every service (cgroup v1 and v2).\n"
               f"[Manager]\nCPUAffinity={cpus}\n"),
    ]
    for slice_name in HOST_SLICES:
        dropins.append(DropIn(
            f"/etc/systemd/system/{slice_name}.d/{DROPIN_NAME}",
            f"{header}# cpuset fence for the slice (cgroup v2; systemd ignores it on v1).\n"
            f"[Slice]\nAllowedCPUs={cpus}\n"))
    for runtime in runtimes:
        dropins.append(DropIn(
            f"/etc/systemd/system/{RUNTIMES[runtime]}.d/{DROPIN_NAME}",
            f"{header}# The runtime's monitors (shim/conmon) may sit in pod cgroups: they inherit this affinity.\n"
            "# Containers may inherit it: cmk isolate and the CDI hook re-pin them within their cpuset.\n"
            f"[Service]\nCPUAffinity={cpus}\nAllowedCPUs={cpus}\n"))
    return tuple(dropins)


def _runtime_config(host: HostOptions) -> tuple[DropIn, ...]:
    """The node-wide hook (``cmk install --hooks-dir``'s declaration) in each runtime's configuration."""
    binary, record = f"{host.install_dir.rstrip('/')}/cmk", f"{host.install_dir.rstrip('/')}/{hook.RECORD_NAME}"
    header = "# Written from `cmk host-config`: run the node-wide cmk hook at the creation of every container.\n"
    files = []
    if "crio" in host.runtimes:
        dirs = ", ".join(f'"{d}"' for d in dict.fromkeys([host.hooks_dir, CRIO_DEFAULT_HOOKS_DIR]))
        files.append(DropIn("/etc/crio/crio.conf.d/90-cmk-node-wide.conf",
                            f"{header}# `cmk install --hooks-dir {host.hooks_dir}` writes cmk-node-wide.json there; "
                            "then `systemctl restart crio`.\n"
                            f"[crio.runtime]\nhooks_dir = [{dirs}]\n"))
    if "containerd" in host.runtimes:
        entry = json.dumps({"path": binary, "args": hook.node_wide_command_line(record), "timeout": 10})
        files.append(DropIn("/etc/containerd/config.toml",
                            f"{header}# First put the hook's binary on the node: `cmk install --install-dir "
                            f"{host.install_dir} --config <the DaemonSet's config.yaml>`\n"
                            "# (runc refuses every container whose hook binary is missing, the DaemonSet's own "
                            "init container that installs it included).\n"
                            "# Then merge this into the handler that runs pods (runc here) and "
                            "`systemctl restart containerd`.\n"
                            "# containerd 1.7 (config version 2):\n"
                            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                            f'  base_runtime_spec = "{CONTAINERD_BASE_SPEC}"\n'
                            "# containerd 2.x (config version 3):\n"
                            '# [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n'
                            f'#   base_runtime_spec = "{CONTAINERD_BASE_SPEC}"\n'))
        files.append(DropIn(CONTAINERD_BASE_SPEC,
                            "# A whole OCI spec (containerd starts from it instead of its defaults): write "
                            f"`ctr oci spec > {CONTAINERD_BASE_SPEC}`,\n"
                            "# then add this entry to its \"hooks\": {\"createRuntime\": [...]} (JSON has no comments: "
                            "drop these lines):\n"
                            f"{entry}\n"))
    return tuple(files)


def _cgroup_driver_config(cgroups: NodeCgroups, runtimes: Iterable[str]) -> tuple[DropIn, ...]:
    """Each runtime's cgroup driver, the kubelet's ``cgroupDriver``: the two must agree."""
    driver = cgroups.driver
    header = "# Written from `cmk host-config`: the runtime's cgroup driver, the same as the kubelet's cgroupDriver.\n"
    systemd = "true" if driver == "systemd" else "false"
    files = []
    if "containerd" in runtimes:
        files.append(DropIn("/etc/containerd/config.toml",
                            f"{header}# Merge this into the handler that runs pods (runc here), then "
                            "`systemctl restart containerd`.\n"
                            "# containerd 1.7 (config version 2):\n"
                            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
                            f"  SystemdCgroup = {systemd}\n"
                            "# containerd 2.x (config version 3):\n"
                            '# [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]\n'
                            f"#   SystemdCgroup = {systemd}\n"))
    if "crio" in runtimes:
        files.append(DropIn(CRIO_CGROUP_DROPIN,
                            f"{header}# Then `systemctl restart crio`.\n"
                            f'[crio.runtime]\ncgroup_manager = "{driver}"\nconmon_cgroup = "pod"\n'))
    return tuple(files)


def _cgroup_notes(cgroups: NodeCgroups) -> list[str]:
    notes = []
    if cgroups.version == 1:
        notes.append("this node boots cgroup v1: the kubelet 1.35+ refuses to start on it unless its configuration "
                     "sets failCgroupV1: false (printed above)")
        if cgroups.systemd:
            notes.append("systemd is the init, but the node boots cgroup v1: the cgroupfs driver's settings are "
                         "printed (cgroup v1 is tested with cgroupfs only; boot cgroup v2 for systemd's)")
    elif cgroups.version is None:
        notes.append("no cgroup mount under the sysfs root (a dump?): the cgroupfs driver's settings are printed; "
                     "run host-config on the node to see its cgroup version and init")
    if cgroups.driver == "systemd":
        notes.append("systemd owns the containers' cgroups here: the node-wide and CDI hooks record each container's "
                     "CPUs with systemd (`systemctl set-property --runtime`), so nothing else must be set for "
                     "confinement to survive `systemctl daemon-reload`")
    return notes


def _reserved(plan: PoolPlan, cores: int) -> frozenset[int]:
    """The first ``cores`` infra cores' CPUs; ``cores`` comes checked (1 or more: the host always needs a core)."""
    infra = plan.pools[Pool.INFRA]
    if cores > len(infra):
        raise CmkError(
            f"{{}} {cores} exceeds the {len(infra)} infra cores "
            f"({format_cpu_list(plan.cpus(Pool.INFRA))}): reserve fewer, or plan smaller pools",
            settings=("reserved_cores",),
        )
    return frozenset(cpu for core in infra[:cores] for cpu in core.cpus)


#: No user namespaces for anyone: the cgroup-namespace attempt on a container's cpuset starts with one. Breaks
#: user-namespaced pods (``hostUsers: false``) and rootless containers, so it is printed as optional.
USERNS_SYSCTL = DropIn(
    "/etc/sysctl.d/90-cmk-no-user-namespaces.conf",
    "# Only where no pod sets hostUsers: false and nothing runs rootless containers; then `sysctl --system`.\n"
    "user.max_user_namespaces = 0\n",
)


def host_config(topology: Topology, options: PlanOptions, host: HostOptions = HostOptions(),
                cgroups: NodeCgroups = NodeCgroups()) -> HostConfig:
    """The kernel line, kubelet settings and drop-ins that serve ``options`` on this topology and these cgroups."""
    unknown = [runtime for runtime in host.runtimes if runtime not in RUNTIMES]
    if unknown:
        raise CmkError(f"unknown container runtime {unknown[0]!r}; known: {', '.join(RUNTIMES)}")
    plan = target_plan(topology, options)
    isolate = plan.cpus(Pool.EXCLUSIVE) | plan.cpus(Pool.SHARED)
    infra = plan.cpus(Pool.INFRA)
    reserved = _reserved(plan, host.reserved_cores)
    notes: list[str] = []

    kernel_args: list[str] = []
    if isolate:
        listed = format_cpu_list(isolate)
        kernel_args.append(f"isolcpus={listed}")
        if host.nohz_full:
            kernel_args.append(f"nohz_full={listed}")
        if host.rcu_nocbs:
            kernel_args.append(f"rcu_nocbs={listed}")
    else:
        notes.append("no exclusive or shared cores planned: nothing to isolate")
    if host.irqaffinity:
        kernel_args.append(f"irqaffinity={format_cpu_list(infra)}")

    non_isol = plan.cpus(Pool.EXCLUSIVE_NON_ISOLCPUS)
    if non_isol:
        notes.append(
            f"exclusive-non-isolcpus CPUs {format_cpu_list(non_isol)} stay schedulable by the kernel: "
            "the drop-ins keep host services off them, the kernel's own threads are not"
        )
    current = topology.isolated & topology.online
    if current != isolate:
        notes.append(
            f"booted with isolcpus={format_cpu_list(current) or '(none)'}: "
            "set the kernel command line above and reboot"
        )

    notes += _cgroup_notes(cgroups)

    kubelet: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # the same as the runtime's (cgroup_driver_config): systemd's where systemd is the init on cgroup v2
        "cgroupDriver": cgroups.driver,
    }
    if cgroups.version == 1:
        kubelet["failCgroupV1"] = False  # the kubelet 1.35+ refuses cgroup v1 without it
    kubelet |= {
        "cpuManagerPolicy": "none",
        "reservedSystemCPUs": format_cpu_list(reserved),
        # RuntimeDefault for every pod that names no seccomp profile: it refuses namespace creation to
        # processes without CAP_SYS_ADMIN, a second wall behind the hook's bound (docs/user/security.md)
        "seccompDefault": True,
    }
    return HostConfig(
        plan=plan,
        isolate=isolate,
        infra=infra,
        reserved=reserved,
        online=topology.online,
        current_isolated=current,
        kernel_args=tuple(kernel_args),
        kubelet=kubelet,
        dropins=_dropins(infra, host.runtimes),
        runtime_config=_runtime_config(host),
        sysctls=(USERNS_SYSCTL,),
        notes=tuple(notes),
        cgroups=cgroups,
        cgroup_driver_config=_cgroup_driver_config(cgroups, host.runtimes),
    )


def host_config_data(config: HostConfig) -> dict[str, Any]:
    """JSON-ready values; CPU lists in kernel syntax (the contract for ``--output json``)."""
    plan = config.plan
    return {
        "pools": {str(pool): format_cpu_list(plan.cpus(pool)) for pool in Pool},
        "kernel_cmdline": list(config.kernel_args),
        "kubelet_config": config.kubelet,
        "kubelet_allocatable_cpu": len(config.online) - len(config.reserved),
        "cgroup": {"driver": config.cgroups.driver, "systemd": config.cgroups.systemd,
                   "version": config.cgroups.version},
        "cgroup_driver_config": [{"path": d.path, "content": d.content} for d in config.cgroup_driver_config],
        "systemd_dropins": [{"path": d.path, "content": d.content} for d in config.dropins],
        "runtime_config": [{"path": d.path, "content": d.content} for d in config.runtime_config],
        "sysctls": [{"path": d.path, "content": d.content} for d in config.sysctls],
        "current_isolcpus": format_cpu_list(config.current_isolated),
        "reboot_needed": config.reboot_needed,
        "notes": list(config.notes),
    }


def _cpus_noun(cpu_list: str) -> str:
    """"CPU" or "CPUs" for a cpu list, so "exclusive on CPU 1" never reads as a count."""
    return "CPU" if cpu_list.isdigit() else "CPUs"


def render_text(config: HostConfig) -> str:
    """A person's view: each setting under the file or place it goes, ready to paste."""
    data = host_config_data(config)
    pools = "; ".join(f"{pool} on {_cpus_noun(cpus)} {cpus}" for pool, cpus in data["pools"].items() if cpus)
    lines = [f"# Pools once configured: {pools}", ""]
    lines += [
        "## Kernel command line: append to GRUB_CMDLINE_LINUX, update-grub, reboot",
        " ".join(config.kernel_args) if config.kernel_args else "(nothing to add)",
        "",
        "## Kubelet configuration: merge into the kubelet's config file (e.g. /var/lib/kubelet/config.yaml)",
        "# Changing cpuManagerPolicy: stop the kubelet, remove /var/lib/kubelet/cpu_manager_state, start it.",
        "# cgroupDriver must be the runtime's too (below); change the two together, on a drained node.",
        (f"# Allocatable cpu = {len(config.online)} online - {len(config.reserved)} reserved = "
         f"{data['kubelet_allocatable_cpu']}: pinned pods request the cpu of their CPUs."),
        yaml.safe_dump(config.kubelet, sort_keys=False).rstrip(),
        "",
        "## systemd drop-ins: write each file, then `systemctl daemon-reexec` (or reboot)",
    ]
    for dropin in config.dropins:
        lines += [f"### {dropin.path}", dropin.content.rstrip(), ""]
    if config.cgroup_driver_config:
        driver, seen = config.cgroups.driver, config.cgroups.seen
        lines += [f"## Container runtime: cgroup driver {driver}, as the kubelet's cgroupDriver ({seen})", ""]
    for file in config.cgroup_driver_config:
        lines += [f"### {file.path}", file.content.rstrip(), ""]
    if config.runtime_config:
        lines += ["## Container runtime: the node-wide hook, so every container is born confined", ""]
    for file in config.runtime_config:
        lines += [f"### {file.path}", file.content.rstrip(), ""]
    lines += ["## Optional: no user namespaces on the node (the hook's bound does not need it)", ""]
    for file in config.sysctls:
        lines += [f"### {file.path}", file.content.rstrip(), ""]
    lines += [f"note: {note}" for note in config.notes]
    return "\n".join(lines).rstrip() + "\n"
