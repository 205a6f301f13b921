"""One flag table: each config-file key is the daemon's flag of that name, converted to the same value."""

from __future__ import annotations

import yaml

from deviceplugin.cli.commands import build_parser
from deviceplugin.cli.configfile import parse_config
from deviceplugin.cli.flags import DAEMON_FLAGS, FILE_KEYS

#: key -> what an operator writes, as a flag value and as YAML (every key needs one: a new key must be tried)
SAMPLES = {
    "num-exclusive-cores": "3", "num-shared-cores": "0", "exclusive-mode": "spread", "shared-mode": "spread",
    "excl-non-isolcpus": "4-5,12", "shared-slots": "7", "infra-slots": "9", "install-dir": "/usr/local/cmk",
    "kubelet-dir": "/k/device-plugins", "sysfs-root": "/dump/sys", "procfs-root": "/dump/proc", "cdi": "false",
    "cdi-dir": "/run/cdi", "metrics-address": "127.0.0.1:9464", "pod-resources-socket": "/k/pr.sock",
    "nfd": "false", "nfd-features-dir": "/nfd", "slot-scope": "numa-node", "unthrottle-exclusive": "false",
    "infra-record": "false", "untaint-node": "false", "per-cpu-metrics": "true", "cgroup-scan-seconds": "5",
    "irq-steering": "exclusive,exclusive-non-isolcpus", "irq-dir": "/host/proc/irq", "mode": "dra",
    "plugins-registry-dir": "/k/plugins_registry", "plugins-dir": "/k/plugins",
}


def test_every_key_is_a_daemon_flag_and_every_flag_but_four_is_a_key():
    flags = {flag.name for group in DAEMON_FLAGS for flag in group.flags}
    assert set(FILE_KEYS) == set(SAMPLES) == flags - {"config", "node-name", "log-level", "log-format"}


def test_a_key_in_the_file_gives_the_value_the_flag_gives_on_the_command_line():
    for key, text in SAMPLES.items():
        flag = FILE_KEYS[key]
        argv = [f"--{'no-' if text == 'false' else ''}{key}"] if flag.switch else [f"--{key}", text]
        given = getattr(build_parser().parse_args(["device-plugin", *argv]), flag.dest)
        assert parse_config({key: yaml.safe_load(text)}, "f") == {flag.dest: given}, key


def test_the_daemon_settings_defaults_are_the_flags_defaults():
    """``DaemonSettings`` is built from the flags; its own defaults (for tests and the demo) must not drift."""
    from dataclasses import MISSING, fields
    from pathlib import Path

    from deviceplugin.daemon.settings import DaemonSettings
    from deviceplugin.model.plan import PlanOptions

    flags = {flag.dest: flag for group in DAEMON_FLAGS for flag in group.flags}
    # None is "off" there (cdi_dir without --cdi, pod_resources_socket unread), not a flag's default
    shared = {f.name: f.default for f in fields(DaemonSettings)
              if f.name in flags and f.default not in (MISSING, None)}
    assert {"kubelet_dir", "sysfs_root", "procfs_root", "install_dir", "irq_dir", "irq_steering",
            "unthrottle_exclusive"} <= set(shared)
    for name, default in shared.items():
        assert default == flags[name].default or Path(str(default)) == Path(str(flags[name].default)), name
    assert DaemonSettings().plan == PlanOptions()
