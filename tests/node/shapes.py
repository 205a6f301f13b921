"""The machine shapes the node tier boots, and the checks each runs: shared by the host and the guest.

A shape is a qemu topology plus a kernel command line. Each check is one
host-side test, asserted from the JSON the guest program wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The pool flags of shape (a): `cmk host-config` is asked for them, and shape (c) boots its answer.
POOL_FLAGS = ("--num-exclusive-cores", "2", "--num-shared-cores", "1")
#: host-config's own flags on top: a real-time node also wants the tick and RCU callbacks off the pools.
HOST_CONFIG_FLAGS = (*POOL_FLAGS, "--nohz-full", "--rcu-nocbs")

KERNEL = "kernel_reports_the_shape"
DEVICES = "devices_and_topology_match_the_kernel"
POOLS = "pool_cpus_match_the_kernel"
HOTPLUG = "cpu_offline_and_online_flip_health_by_uevent"
STATIC_PINNER = "static_pinner_pins_and_execs_in_place"
HOOK_RUNC = "hook_confines_a_runc_container_on_cgroup_v2"
HOOK_CRUN = "hook_confines_a_crun_container_on_cgroup_v2"
ORDINARY_RUNC = "node_wide_hook_keeps_an_ordinary_runc_container_on_the_infra_cpus"
ORDINARY_CRUN = "node_wide_hook_keeps_an_ordinary_crun_container_on_the_infra_cpus"
BOTH_HOOKS_RUNC = "node_wide_and_cdi_hooks_agree_on_a_pinned_runc_container"
BOTH_HOOKS_CRUN = "node_wide_and_cdi_hooks_agree_on_a_pinned_crun_container"
#: The noisy container is an ordinary one too: it is checked as one on the shape that runs it.
NOISY_RUNC = "node_wide_hook_keeps_a_noisy_ordinary_runc_container_off_the_exclusive_cpus"
NOISY_CRUN = "node_wide_hook_keeps_a_noisy_ordinary_crun_container_off_the_exclusive_cpus"
#: The node-wide hook's checks, in the order they run.
NODE_WIDE = (ORDINARY_RUNC, ORDINARY_CRUN, BOTH_HOOKS_RUNC, BOTH_HOOKS_CRUN, NOISY_RUNC, NOISY_CRUN)
#: The cgroup-namespace escape of a root container, at start and exec'd later, with and without nsdelegate.
ESCAPE_RUNC = "a_root_runc_container_cannot_widen_its_cpuset_on_cgroup_v2"
ESCAPE_CRUN = "a_root_crun_container_cannot_widen_its_cpuset_on_cgroup_v2"
HOST_CONFIG = "host_config_plans_the_served_pools"
DESCRIBE = "describe_reports_the_pools_host_config_planned"
NO_REBOOT = "host_config_says_no_reboot_is_needed"
USAGE = "metrics_and_describe_show_a_leak_onto_an_unheld_exclusive_cpu"
IRQ_STEERING = "virtio_interrupts_stay_off_held_exclusive_cpus_and_their_masks_come_back"
IRQBALANCE = "with_irqbalance_running_the_daemon_bans_the_held_cpus_through_it_and_writes_no_mask"


@dataclass(frozen=True)
class Shape:
    name: str
    #: qemu -smp: CPUs, sockets, cores per socket, threads per core.
    smp: str
    #: NUMA nodes: (memory, cpus) each.
    numa: tuple[tuple[str, str], ...]
    #: the kernel command line under test (shape (c) takes host-config's instead).
    cmdline: str
    #: the device-plugin / describe flags (the plan).
    pool_flags: tuple[str, ...]
    checks: tuple[str, ...]
    #: what the kernel must show: isolated CPUs ("" = none), NUMA nodes, threads per core.
    isolated: str | None
    numa_nodes: int
    threads_per_core: int
    #: the shape whose host-config answer is this one's command line, if any.
    cmdline_from: str | None = None

    @property
    def cpus(self) -> int:
        return int(self.smp.split(",")[0])


NUMA_SMT_ISOLCPUS = Shape(
    name="a-numa-smt-isolcpus",
    smp="8,sockets=2,cores=2,threads=2",
    numa=(("1G", "0-3"), ("1G", "4-7")),
    cmdline="isolcpus=managed_irq,domain,2-7 nohz_full=2-7",
    pool_flags=POOL_FLAGS,
    checks=(KERNEL, DEVICES, POOLS, HOTPLUG, STATIC_PINNER, HOOK_RUNC, HOOK_CRUN, ORDINARY_RUNC,
            ORDINARY_CRUN, ESCAPE_RUNC, ESCAPE_CRUN, HOST_CONFIG, USAGE),
    isolated="2-7",
    numa_nodes=2,
    threads_per_core=2,
)

NO_ISOLCPUS = Shape(
    name="b-no-isolcpus",
    smp="4,sockets=2,cores=2,threads=1",
    numa=(("1G", "0-1"), ("1G", "2-3")),
    cmdline="",
    pool_flags=(),
    # The scheduler uses "exclusive" CPUs here: the shape where the noisy container's baseline shows it.
    checks=(KERNEL, DEVICES, POOLS, STATIC_PINNER, HOOK_RUNC, BOTH_HOOKS_RUNC, BOTH_HOOKS_CRUN, NOISY_RUNC,
            NOISY_CRUN, IRQ_STEERING, IRQBALANCE),
    isolated="",
    numa_nodes=2,
    threads_per_core=1,
)

HOST_CONFIG_BOOT = Shape(
    name="c-host-config-cmdline",
    smp=NUMA_SMT_ISOLCPUS.smp,
    numa=NUMA_SMT_ISOLCPUS.numa,
    cmdline="",
    pool_flags=POOL_FLAGS,
    checks=(KERNEL, DESCRIBE, NO_REBOOT),
    isolated=None,  # whatever host-config printed
    numa_nodes=2,
    threads_per_core=2,
    cmdline_from=NUMA_SMT_ISOLCPUS.name,
)

SHAPES = {shape.name: shape for shape in (NUMA_SMT_ISOLCPUS, NO_ISOLCPUS, HOST_CONFIG_BOOT)}
