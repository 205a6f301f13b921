"""The YAML config file: same keys as the flags, flags win, bad keys and types named in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from deviceplugin.cli.commands import build_parser
from deviceplugin.cli.configfile import (
    ConfigError,
    apply_config,
    load_config,
    parse_config,
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
