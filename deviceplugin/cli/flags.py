"""The flag table: every flag the planning commands and the daemon share, once.

Each :class:`Flag` generates its argparse option and, when it has a ``load``
converter, its ``--config`` file key (the flag's name) and that key's JSON
schema (the chart's, ``tools/settings.py``), so a flag and its key cannot
drift apart, and ``cmk describe`` plans exactly as the daemon does for the
same flags and file. The plan's flags are made from the settings
:class:`~deviceplugin.model.plan.PlanOptions` declares (:func:`from_setting`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from api.constants import (
    DEVICE_PLUGIN_DIR,
    PLUGINS_DIR,
    PLUGINS_REGISTRY_DIR,
    POD_RESOURCES_SOCKET,
)
from deviceplugin.cli.converters import bounded
from deviceplugin.host.cdi import DEFAULT_CDI_DIR
from deviceplugin.host.installedpinner import (
    DEFAULT_INSTALL_DIR,
    checked_hooks_dir,
    checked_install_dir,
)
from deviceplugin.host.irqs import DEFAULT_IRQ_DIR
from deviceplugin.host.nfd import DEFAULT_FEATURES_DIR
from deviceplugin.host.sysfs import DEFAULT_PROCFS_ROOT, DEFAULT_SYSFS_ROOT
from deviceplugin.model.limits import (
    MAX_SLOTS,
    CpuListError,
    checked_cpu_list,
)
from deviceplugin.model.modes import ServingMode
from deviceplugin.model.plan import CORE_POOLS, PlanOptions, Pool
from deviceplugin.model.settings import Declared, declared
from deviceplugin.observe.logs import FORMATS

# --- command-line converters (argparse ``type``): text in, value or ArgumentTypeError out ---


#: Slots, 1 or more: few enough that one ListAndWatch message stays well under the kubelet's 4 MiB.
slots = bounded(1, MAX_SLOTS)


def cpu_set(text: str) -> frozenset[int]:
    """A cpu list in the kernel's syntax."""
    try:
        return checked_cpu_list(text)
    except CpuListError as err:
        raise argparse.ArgumentTypeError(f"{err} (expected e.g. 4-5,12-13)") from None


def steered_pools(text: str) -> frozenset[Pool]:
    """Comma-separated pools of whole cores (``exclusive,exclusive-non-isolcpus``); "" or none: no pool."""
    names = [name for name in (part.strip() for part in text.split(",")) if name and name != "none"]
    wrong = [name for name in names if name not in {str(pool) for pool in CORE_POOLS}]
    if wrong:
        raise argparse.ArgumentTypeError(f"IRQ steering is for pools of whole cores ({', '.join(sorted(CORE_POOLS))}),"
                                         f" got {', '.join(wrong)}")
    return frozenset(Pool(name) for name in names)


def hooks_dir(text: str) -> str:
    """A hooks.d directory the runtime reads by its absolute path (not mounted into containers)."""
    try:
        return checked_hooks_dir(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def hooks_dir_path(text: str) -> Path:
    return Path(hooks_dir(text))


def host_dir(text: str) -> str:
    """The install directory: Allocate answers and CDI specs mount it into every container."""
    try:
        return checked_install_dir(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[v6]:PORT`` -> (host, port); ValueError saying what is expected."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not host.isprintable() or not port.isascii() or not port.isdigit() \
            or len(port) > 5 or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 0.0.0.0:9464 or 127.0.0.1:0), got {text!r}")
    return host, int(port)


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, for argparse."""
    try:
        return parse_address(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


# --- config-file converters: a YAML value in, the flag's value or TypeError/ValueError out ---


def whole(check: Callable[[str], int]) -> Callable[[object], int]:
    """A YAML integer (not a string, not a bool), then the flag's own check."""

    def convert(value: object) -> int:
        if isinstance(value, str):  # YAML's "1" and '1' are strings: say so, or "got '1'" reads as nonsense
            raise TypeError(f"expected a whole number, got the quoted string {value!r}: write it without quotes")
        if type(value) is not int:
            raise TypeError("expected a whole number")
        return check(str(value))

    return convert


def text_value(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError("expected a non-empty string")
    if not value.isprintable():
        raise ValueError(f"must not hold control characters (newline, NUL...), got {value[:80]!r}")
    return value


def choice_value(kind: type[StrEnum]) -> Callable[[object], Any]:
    """A converter to one of an enum's values (``packed``, ``numa-node``)."""

    def convert(value: object) -> Any:
        text = text_value(value)
        if text not in list(kind):
            raise ValueError(f"expected one of {', '.join(kind)}, got {text!r}")
        return kind(text)

    return convert


def cpu_set_value(value: object) -> frozenset[int]:
    """A cpu list as text, one integer, or a YAML list of integers."""
    if isinstance(value, list) and all(type(item) is int for item in value):
        value = ",".join(str(item) for item in value)
    elif type(value) is int:
        value = str(value)
    return cpu_set(text_value(value))


def pools_value(value: object) -> frozenset[Pool]:
    """A YAML list of pool names, or one comma-separated string."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        value = ",".join(value)
    if value == "":
        return frozenset()
    try:
        return steered_pools(text_value(value))
    except argparse.ArgumentTypeError as err:
        raise ValueError(str(err)) from None


def switch_value(value: object) -> bool:
    if type(value) is not bool:
        raise TypeError("expected true or false")
    return value


def path_value(value: object) -> Path:
    return Path(text_value(value))


# --- the table -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Flag:
    """``--name``: parsed from the command line with ``parse``, from the config file with ``load``."""

    name: str
    help: str
    parse: Callable[[str], Any] = str
    #: None: not a config-file key (e.g. --config itself, the log settings a file cannot fix in time)
    load: Callable[[object], Any] | None = None
    default: Any = None
    metavar: str | None = None
    choices: Sequence[Any] | None = None
    #: ``--name``/``--no-name``
    switch: bool = False
    #: may be given more than once: a list (``default`` must then be None, meaning none given)
    repeat: bool = False
    #: the config key's JSON schema: what ``load`` takes (the chart's values schema is made of these);
    #: None: a switch's is boolean, any other's a non-empty string
    schema: Mapping[str, Any] | None = None

    @property
    def key_schema(self) -> Mapping[str, Any]:
        if self.schema is not None:
            return self.schema
        return BOOLEAN_SCHEMA if self.switch else TEXT_SCHEMA

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        if self.switch:
            parser.add_argument(f"--{self.name}", action=argparse.BooleanOptionalAction, default=self.default,
                                help=self.help)
        elif self.repeat:
            parser.add_argument(f"--{self.name}", type=self.parse, action="append", default=[],
                                metavar=self.metavar, choices=self.choices, help=self.help)
        else:
            parser.add_argument(f"--{self.name}", type=self.parse, default=self.default, metavar=self.metavar,
                                choices=self.choices, help=self.help)


@dataclass(frozen=True)
class FlagGroup:
    """An argparse group; ``title`` None puts the flags among the parser's own options."""

    title: str | None
    flags: tuple[Flag, ...]


def add_flags(parser: argparse.ArgumentParser, *groups: FlagGroup) -> list[Flag]:
    """Add the groups' flags to ``parser``; returns them, e.g. for :func:`configfile.defer_defaults`."""
    added: list[Flag] = []
    for group in groups:
        target = parser if group.title is None else parser.add_argument_group(group.title)
        for flag in group.flags:
            flag.add_to(target)
            added.append(flag)
    return added


def whole_flag(name: str, least: int, most: int, **rest: Any) -> Flag:
    """``--name N``, a whole number from ``least`` to ``most`` on the command line and in the file."""
    parse = bounded(least, most)
    return Flag(name=name, parse=parse, load=whole(parse), schema={"type": "integer", "minimum": least,
                                                                   "maximum": most}, **rest)


def switch_flag(name: str, default: bool, help: str) -> Flag:
    """``--name``/``--no-name``, ``true``/``false`` in the file."""
    return Flag(name=name, switch=True, load=switch_value, default=default, help=help)


def from_setting(item: Declared) -> Flag:
    """The flag and config key of a declared setting, its converters chosen by the field's type."""
    kind = item.kind
    declared = item.setting
    help = f"{declared.help} (default: {declared.default_text})"
    common: dict[str, Any] = {"name": item.name, "default": item.default, "metavar": declared.metavar, "help": help}
    if kind is int:
        assert declared.least is not None and declared.most is not None, f"{item.name}: a whole number has bounds"
        return whole_flag(least=declared.least, most=declared.most, **common)
    if isinstance(kind, type) and issubclass(kind, StrEnum):
        return Flag(parse=kind, load=choice_value(kind), choices=list(kind), schema={"enum": list(kind)}, **common)
    if kind == frozenset[int]:
        return Flag(parse=cpu_set, load=cpu_set_value, schema=CPUS_SCHEMA, **common)
    raise TypeError(f"{item.name}: no flag for a setting of type {kind}")


TEXT_SCHEMA: Mapping[str, Any] = {"type": "string", "minLength": 1}
BOOLEAN_SCHEMA: Mapping[str, Any] = {"type": "boolean"}
CPUS_SCHEMA: Mapping[str, Any] = {
    "description": "a kernel cpu list, e.g. \"2-3\", one CPU, or a list of CPUs",
    "oneOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 0},
              {"type": "array", "items": {"type": "integer", "minimum": 0}}],
}
POOLS_SCHEMA: Mapping[str, Any] = {
    "description": "pools of whole cores: a list, or one comma-separated string",
    "oneOf": [{"type": "array", "uniqueItems": True, "items": {"enum": sorted(str(pool) for pool in CORE_POOLS)}},
              {"type": "string"}],
}

ROOTS = FlagGroup(None, (
    Flag(name="sysfs-root", parse=Path, load=path_value, default=DEFAULT_SYSFS_ROOT, metavar="DIR",
         help="read the CPU topology from DIR/devices/system (default: /sys)"),
    Flag(name="procfs-root", parse=Path, load=path_value, default=DEFAULT_PROCFS_ROOT, metavar="DIR",
         help="read the kernel command line from DIR/cmdline (default: /proc)"),
))

PLAN = FlagGroup("pool plan (CMK's flags)", tuple(from_setting(item) for item in declared(PlanOptions)))

#: Where the kubelet serves its pod resources API (what ``cmk describe`` and the metrics read).
DEFAULT_POD_RESOURCES_SOCKET = Path(POD_RESOURCES_SOCKET)


def pod_resources_socket(purpose: str) -> Flag:
    """``--pod-resources-socket``, its help saying what the command reads it for."""
    return Flag(name="pod-resources-socket", parse=Path, load=path_value, default=DEFAULT_POD_RESOURCES_SOCKET,
                metavar="PATH",
                help=f"the kubelet's pod resources socket, {purpose} (default: {DEFAULT_POD_RESOURCES_SOCKET})")


CONFIG_HELP = "flags given on the command line win"

#: Which section of a config file with per-node sections applies (``configfile.select_section``).
NODE_NAME = Flag(name="node-name", metavar="NAME",
                 help="the node whose section of a --config file with per-node sections applies "
                      "(default: $NODE_NAME, which the DaemonSet sets from spec.nodeName)")


def config_flag(command: str) -> Flag:
    """``--config`` of a planning command, so it plans exactly as the daemon does for the same file."""
    return Flag(name="config", parse=Path, metavar="FILE",
                help=f"the daemon's --config YAML file, so {command} plans exactly as the daemon does; {CONFIG_HELP}")

DAEMON = FlagGroup("daemon", (
    Flag(name="mode", parse=ServingMode, load=choice_value(ServingMode), choices=list(ServingMode),
         schema={"enum": list(ServingMode)}, default=ServingMode.DEVICE_PLUGIN,
         help="how the pools reach the kubelet: device-plugin (one device plugin per pool, capacity in the "
              "node's status) or dra (one DRA driver, cpu.cmk.intel.com, its devices in ResourceSlices and "
              "served to unchanged pods through deploy/dra's DeviceClasses; Kubernetes 1.36+); never both on "
              "one node (docs/user/dra.md) (default: device-plugin)"),
    Flag(name="plugins-registry-dir", parse=Path, load=path_value, default=Path(PLUGINS_REGISTRY_DIR), metavar="DIR",
         help=f"--mode dra: the kubelet's plugin registration directory, under its --root-dir "
              f"(default: {PLUGINS_REGISTRY_DIR})"),
    Flag(name="plugins-dir", parse=Path, load=path_value, default=Path(PLUGINS_DIR), metavar="DIR",
         help="--mode dra: the kubelet's plugins directory, under its --root-dir; the driver's socket and its "
              f"prepared-claims checkpoint go in DIR/cpu.cmk.intel.com (default: {PLUGINS_DIR})"),
    Flag(name="kubelet-dir", parse=Path, load=path_value, default=Path(DEVICE_PLUGIN_DIR), metavar="DIR",
         help=f"the kubelet's device-plugin directory (default: {DEVICE_PLUGIN_DIR})"),
    Flag(name="install-dir", parse=host_dir, load=lambda value: host_dir(text_value(value)),
         default=str(DEFAULT_INSTALL_DIR), metavar="DIR",
         help="host directory holding the pinner (cmk install --install-dir), mounted "
              f"read-only at /opt/bin in every container (default: {DEFAULT_INSTALL_DIR})"),
    switch_flag("cdi", True,
                help="write a CDI spec and name its device in every Allocate answer, so the "
                     "container runtime's hook confines each container to its CPUs (cgroup cpuset "
                     "and affinity) even if it never runs cmk isolate. Needs kubelet 1.28+ "
                     "(DevicePluginCDIDevices: beta and on in 1.29, GA in 1.31) and containerd 1.7+ "
                     "with enable_cdi, or CRI-O 1.23+; older ones ignore it (default: on)"),
    switch_flag("unthrottle-exclusive", True,
                help="mark the CDI devices of whole exclusive cores, so the hook removes the CFS quota "
                     "of a container that holds only such cores (never of one that also holds shared or "
                     "infra CPUs; the pod's cgroup keeps the kubelet's quota) (default: on)"),
    switch_flag("infra-record", True,
                help="keep the node-wide hook's infra record (the infra CPUs, in --install-dir) in step "
                     "with the plan: written only when its content differs (default: on)"),
    switch_flag("untaint-node", True,
                help="remove this node's cmk.intel.com/pools-not-ready taint once every pool is registered with "
                     "the kubelet, through the API server with the pod's service account (the DaemonSet's "
                     "RBAC allows only that); outside a pod, or with no node name, nothing is done (default: on)"),
    Flag(name="irq-steering", parse=steered_pools, load=pools_value, default=frozenset(), metavar="POOLS",
         schema=POOLS_SCHEMA,
         help="keep device interrupts off the CPUs containers hold in these pools (exclusive, "
              "exclusive-non-isolcpus; comma-separated) while they hold them, and give the IRQ masks "
              "back after; through irqbalance where it runs (docs/user/irq-steering.md) (default: none)"),
    Flag(name="irq-dir", parse=Path, load=path_value, default=DEFAULT_IRQ_DIR, metavar="DIR",
         help=f"the IRQ masks --irq-steering writes: the host's /proc/irq, mounted writable "
              f"(a container's own is read-only) (default: {DEFAULT_IRQ_DIR})"),
    Flag(name="cdi-dir", parse=Path, load=path_value, default=DEFAULT_CDI_DIR, metavar="DIR",
         help="the runtime's CDI spec directory the spec is written into at start; it stays "
              "when the daemon stops (restarted containers still name its devices): docs/user/"
              f"upgrade-uninstall.md says when to remove it (default: {DEFAULT_CDI_DIR})"),
    Flag(name="config", parse=Path, metavar="FILE",
         help="YAML file with these flags as keys, all but --config, --node-name, --log-level and --log-format "
              f"(e.g. num-exclusive-cores: 4), flat or as default: and per-node nodes: sections; {CONFIG_HELP}"),
    NODE_NAME,
    Flag(name="log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
         help="logging threshold (default: INFO)"),
))

OBSERVE = FlagGroup("observability", (
    Flag(name="log-format", choices=FORMATS, default="text",
         help="one line per event: text (key=value) or json (default: text)"),
    Flag(name="metrics-address", parse=address, load=lambda value: parse_address(text_value(value)),
         metavar="HOST:PORT", help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off)"),
    switch_flag("per-cpu-metrics", False,
                help="add per-CPU series (busy time, interrupts, softirqs, held, unheld busy time) to the "
                     "per-pool ones: a few per CPU, thousands on a large node, and node_exporter's "
                     "node_cpu_seconds_total joined with cmk_cpu_info on cpu gives the busy time (default: off)"),
    whole_flag("cgroup-scan-seconds", 0, 3600, default=30, metavar="SECONDS",
               help="reuse a walk of the cgroup tree for cmk_unconfined_containers for up to SECONDS while the "
                    "kubelet's holdings stay the same; 0 walks at every scrape (default: 30)"),
    pod_resources_socket("read before serving to keep cores still held under other IDs or pools out of every "
                         "pool, for the allocated-devices metric and to name the pod behind each allocation "
                         "in the log"),
    Flag(name="nfd-features-dir", parse=Path, load=path_value, default=DEFAULT_FEATURES_DIR, metavar="DIR",
         help=f"write Node Feature Discovery labels to DIR/cmk.intel.com (default: {DEFAULT_FEATURES_DIR})"),
    switch_flag("nfd", True,
                help="write the Node Feature Discovery feature file (default: on)"),
))

#: ``cmk install``'s own flags; it plans the infra record with ``ROOTS`` and ``PLAN`` too.
INSTALL = FlagGroup(None, (
    Flag(name="hooks-dir", parse=hooks_dir_path, repeat=True, metavar="DIR",
         help="also write the node-wide hook's declaration into this OCI hooks.d directory "
              "(podman, CRI-O's hooks_dir; repeatable)"),
    Flag(name="config", parse=Path, metavar="FILE",
         help="the daemon's YAML config file: its plan and root keys plan the infra record; " + CONFIG_HELP),
    NODE_NAME,
))

#: ``cmk device-plugin``'s flags, in help order.
DAEMON_FLAGS = (ROOTS, PLAN, DAEMON, OBSERVE)

#: The config file's keys: every daemon flag with a ``load`` converter, the plan's (most often set) first.
FILE_KEYS: Mapping[str, Flag] = {
    flag.name: flag for group in (PLAN, DAEMON, ROOTS, OBSERVE) for flag in group.flags if flag.load is not None
}


def plan_options(args: argparse.Namespace) -> PlanOptions:
    """The plan's settings from parsed (checked) flags and file."""
    return PlanOptions(**{item.name: getattr(args, item.name) for item in fields(PlanOptions)})


def flag_named(dest: str) -> str:
    """How the command line names a setting (:meth:`CmkError.named`): ``--num-exclusive-cores``."""
    return f"--{dest.replace('_', '-')}"
