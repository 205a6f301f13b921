"""The YAML config file: same keys as the flags, flags win, bad keys and types named in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deviceplugin.cli.commands import build_parser
from deviceplugin.cli.configfile import (
    ConfigError,
    apply_config,
    load_config,
    node_name,
    parse_config,
    read_config,
)
from deviceplugin.model.plan import DEFAULT_SLOTS, Mode


def parse(argv, config_text=None, tmp_path=None):
    args = build_parser().parse_args(["device-plugin", *argv])
    values = {}
    if config_text is not None:
        path = tmp_path / "cmk.yaml"
        path.write_text(config_text)
        values = load_config(path)
    return apply_config(args, values)


def test_file_values_fill_flags_not_given(tmp_path):
    args = parse([], "num-exclusive-cores: 3\nshared-mode: spread\nexcl-non-isolcpus: 4-5,12\n"
                     "install-dir: /usr/local/cmk\ninfra-slots: 20\n", tmp_path)
    assert args.num_exclusive_cores == 3
    assert args.shared_mode is Mode.SPREAD
    assert args.excl_non_isolcpus == {4, 5, 12}
    assert args.install_dir == "/usr/local/cmk"
    assert args.infra_slots == 20
    assert args.shared_slots == DEFAULT_SLOTS and args.num_shared_cores is None


def test_flags_win_over_the_file_even_when_equal_to_their_default(tmp_path):
    args = parse(["--exclusive-mode", "packed", "--num-exclusive-cores", "1"],
                 "exclusive-mode: spread\nnum-exclusive-cores: 3\n", tmp_path)
    assert args.exclusive_mode is Mode.PACKED and args.num_exclusive_cores == 1


def test_without_a_file_defaults_apply():
    args = parse([])
    assert args.exclusive_mode is Mode.PACKED
    assert args.kubelet_dir == Path("/var/lib/kubelet/device-plugins")
    assert args.install_dir == "/opt/bin"


def test_cpu_list_accepts_a_yaml_list():
    assert parse_config({"excl-non-isolcpus": [1, 3]}, "f")["excl_non_isolcpus"] == {1, 3}


@pytest.mark.parametrize(("data", "message"), [
    ({"num-exclusive-cores": "3"}, "key 'num-exclusive-cores': expected a whole number"),
    ({"num-exclusive-cores": True}, "key 'num-exclusive-cores': expected a whole number"),
    ({"num-shared-cores": -1}, "key 'num-shared-cores': must be 0 or more"),
    ({"shared-slots": 0}, "key 'shared-slots': must be 1 or more"),
    ({"exclusive-mode": "tight"}, "key 'exclusive-mode': expected one of packed, spread"),
    ({"excl-non-isolcpus": "4-"}, "key 'excl-non-isolcpus'"),
    ({"install-dir": 7}, "key 'install-dir': expected a non-empty string"),
    ({"num_exclusive_cores": 3}, "unknown key 'num_exclusive_cores'; known keys: num-exclusive-cores"),
])
def test_bad_values_name_the_key(data, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_config(data, "cmk.yaml")
    assert "\n" not in str(info.value) and str(info.value).startswith("cmk.yaml: ")


def test_a_quoted_number_is_named_a_quoted_string(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('num-exclusive-cores: "1"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).endswith("key 'num-exclusive-cores': expected a whole number, got the quoted string "
                                    "'1': write it without quotes")


def test_a_list_document_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- 1\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(path)


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("num-exclusive-cores: 3\nshared-mode: [spread\n")
    with pytest.raises(ConfigError, match="line 3"):
        load_config(path)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file .*missing.yaml: No such file"):
        load_config(tmp_path / "missing.yaml")


def test_observability_flags_are_config_keys_too():
    values = parse_config({"metrics-address": "0.0.0.0:9464", "pod-resources-socket": "/run/pr.sock",
                           "nfd": False, "nfd-features-dir": "/etc/nfd"}, "config.yaml")
    assert values == {"metrics_address": ("0.0.0.0", 9464), "pod_resources_socket": Path("/run/pr.sock"),
                      "nfd": False, "nfd_features_dir": Path("/etc/nfd")}
    with pytest.raises(ConfigError, match="key 'metrics-address': expected HOST:PORT"):
        parse_config({"metrics-address": "9464"}, "config.yaml")


def test_install_dir_must_be_an_absolute_host_path():
    """It goes into every Allocate mount and the CDI spec's hook path: the runtime needs a host path."""
    with pytest.raises(ConfigError, match=r"key 'install-dir': must be an absolute host path, got 'opt/bin'\Z"):
        parse_config({"install-dir": "opt/bin"}, "config.yaml")
    assert parse_config({"install-dir": "/opt/cmk"}, "config.yaml") == {"install_dir": "/opt/cmk"}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["device-plugin", "--install-dir", "opt/bin"])


# --- per-node sections: one file, one DaemonSet, many node groups --------------------------------

SECTIONED = """\
default:
  num-exclusive-cores: 2
  shared-slots: 50
nodes:
  - names: [edge-1, 'rack?-cpu']
    config: {num-exclusive-cores: 4}
  - nameRegex: 'big-[0-9]+'
    config: {num-exclusive-cores: 16, exclusive-mode: spread}
  - names: ['big-*']
    config: {num-exclusive-cores: 1}
"""


def sectioned(tmp_path, text=SECTIONED):
    path = tmp_path / "cmk.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("node", "section", "exclusive"), [
    ("edge-1", "nodes[0]", 4),
    ("rack7-cpu", "nodes[0]", 4),
    ("big-12", "nodes[1]", 16),  # the regex entry comes first: first match wins over the glob below
    ("big-x", "nodes[2]", 1),
    ("edge-10", "default", 2),  # names are exact or globs, never prefixes
])
def test_the_first_matching_entry_is_laid_over_the_default(tmp_path, node, section, exclusive):
    active = read_config(sectioned(tmp_path), node)
    assert active.section == section and active.node == node
    assert active.values["num_exclusive_cores"] == exclusive
    assert active.values["shared_slots"] == 50  # from default: kept under every entry


def test_the_generation_follows_what_the_node_takes_only(tmp_path):
    first = read_config(sectioned(tmp_path), "edge-1").generation
    assert first == read_config(sectioned(tmp_path), "rack1-cpu").generation  # one group, one generation
    assert first != read_config(sectioned(tmp_path), "edge-10").generation
    assert re.fullmatch(r"[0-9a-f]{12}", first)
    other_group_edited = SECTIONED.replace("num-exclusive-cores: 1}", "num-exclusive-cores: 3}")
    assert read_config(sectioned(tmp_path, other_group_edited), "edge-1").generation == first
    own_edited = SECTIONED.replace("shared-slots: 50", "shared-slots: 51")
    assert read_config(sectioned(tmp_path, own_edited), "edge-1").generation != first


def test_a_flat_file_is_the_default_section(tmp_path):
    active = read_config(sectioned(tmp_path, "num-exclusive-cores: 3\n"), "any-node")
    assert (active.section, active.values) == ("default", {"num_exclusive_cores": 3})
    assert read_config(sectioned(tmp_path, "num-exclusive-cores: 3\n"), None).section == "default"


@pytest.mark.parametrize(("text", "node", "message"), [
    (SECTIONED, None, ("has per-node sections but the node name is unknown: set NODE_NAME (the DaemonSet sets it "
                      "from spec.nodeName) or give --node-name")),
    (SECTIONED.replace("{num-exclusive-cores: 1}", "{num-exclusive-core: 1}"), "edge-1",
     "nodes[2]: config: unknown key 'num-exclusive-core'"),  # another group's typo fails on every node
    ("default: {}\nnum-exclusive-cores: 3\n", "n", "key 'num-exclusive-cores' beside default:/nodes:"),
    ("nodes:\n  - config: {}\n", "n", "nodes[0]: give exactly one of names:"),
    ("nodes:\n  - {names: [a], nameRegex: a}\n", "n", "nodes[0]: give exactly one of names:"),
    ("nodes:\n  - {nameRegex: '(', config: {}}\n", "n", "nodes[0]: nameRegex '(': missing"),
    ("nodes:\n  - {names: a, config: {}}\n", "n", "nodes[0]: names: expected a list"),
    ("nodes:\n  - {name: [a], config: {}}\n", "n", "nodes[0]: unknown key 'name'; known keys: names, nameRegex"),
    ("nodes: {a: 1}\n", "n", "nodes: expected a list"),
    ("default:\n  shared-slots: 0\n", "n", "default: key 'shared-slots': must be 1 or more"),
])
def test_bad_sections_are_one_line_naming_the_place(tmp_path, text, node, message):
    with pytest.raises(ConfigError) as info:
        read_config(sectioned(tmp_path, text), node)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_node_name_comes_from_the_flag_then_the_downward_api_env(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "from-env")
    assert node_name("given") == "given" and node_name(None) == "from-env"
    monkeypatch.delenv("NODE_NAME")
    assert node_name(None) is None


def test_a_daemon_with_its_own_kubelet_dir_is_told_which_host_paths_it_still_writes():
    from deviceplugin.cli.device_plugin import shared_host_paths

    def shared(*argv):
        return shared_host_paths(apply_config(build_parser().parse_args(["device-plugin", *argv]), {}))

    assert shared() == ()  # the kubelet's own directory: a DaemonSet, the host paths are meant
    assert shared("--kubelet-dir", "/tmp/k") == (
        "CDI spec in /var/run/cdi (--cdi-dir DIR or --no-cdi)",
        "node-wide hook's infra record in /opt/bin (--install-dir DIR or --no-infra-record)",
        "NFD feature file in /etc/kubernetes/node-feature-discovery/features.d (--nfd-features-dir DIR or --no-nfd)")
    assert shared("--kubelet-dir", "/tmp/k", "--cdi-dir", "/tmp/cdi", "--no-infra-record", "--no-nfd") == ()
    assert shared("--kubelet-dir", "/tmp/k", "--no-cdi", "--install-dir", "/tmp/bin",
                  "--nfd-features-dir", "/tmp/nfd") == ()


def test_the_shipped_configs_commented_settings_are_keys_the_daemon_takes(tmp_path):
    """deploy/base/config.yaml shows the pool sizes (and other opt-ins) as comments: uncommented, each must load.

    The first-hour trap was a README sending users to set pool sizes in a file that had no such key.
    """
    shipped = (Path(__file__).resolve().parents[2] / "deploy" / "base" / "config.yaml").read_text()
    shown = [match.group(1) for match in re.finditer(r"^# ([a-z-]+: [^#\n]*?)[ \t]*(?:#.*)?$", shipped, re.MULTILINE)]
    assert {"num-exclusive-cores", "num-shared-cores"} <= {line.split(":")[0] for line in shown}
    uncommented = shipped + "".join(f"{line}\n" for line in shown)
    args = parse([], uncommented, tmp_path)
    assert (args.num_exclusive_cores, args.num_shared_cores) == (4, 1)
