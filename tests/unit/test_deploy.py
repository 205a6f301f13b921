"""deploy/: every kustomization renders, validates against current Kubernetes, and keeps least privilege.

Rendering is the real ``kubectl kustomize``; validation is ``kubernetes-validate`` in strict mode
(unknown fields and API versions the cluster no longer serves are errors) against 1.30, the oldest
release we support, and the newest schemas it ships. Policy checks read the rendered objects, so an
overlay cannot undo what the base promises.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from deviceplugin.cli.commands import build_parser
from deviceplugin.cli.configfile import apply_config, parse_config
from deviceplugin.model.plan import RESOURCE_NAMES, Pool
from tests.support.manifests import DEPLOY, OLDEST, ROOT, VERSIONS, objects, render
from tests.support.monitoring import validate_operator_object

KUSTOMIZATIONS = sorted(path.parent.relative_to(DEPLOY).as_posix() for path in DEPLOY.rglob("kustomization.yaml"))
POD_KINDS = {"Pod", "DaemonSet", "Deployment", "StatefulSet", "Job", "CronJob", "ReplicaSet"}
RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
POOL_OF_RESOURCE = {resource: str(pool) for pool, resource in RESOURCE_NAMES.items()}


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def all_pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for kustomization in KUSTOMIZATIONS:
        for obj in render(kustomization):
            if obj["kind"] in POD_KINDS:
                yield f"{kustomization}:{obj['kind']}/{obj['metadata']['name']}", pod_spec(obj)


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return spec.get("initContainers", []) + spec["containers"]


def pool_config(kustomization: str) -> dict[str, Any]:
    """The daemon's --config ConfigMap (beside it: the node group's ConfigMap for the admission policy)."""
    (config,) = [c for c in objects("ConfigMap", kustomization) if "config.yaml" in c.get("data", {})]
    return config


def daemon_container(kustomization: str) -> dict[str, Any]:
    (daemonset,) = objects("DaemonSet", kustomization)
    (daemon,) = [c for c in pod_spec(daemonset)["containers"] if c["name"] == "daemon"]
    return daemon


DAEMON_KUSTOMIZATIONS = [k for k in KUSTOMIZATIONS if k not in ("examples", "admission", "components/monitoring", "dra")]
#: Kustomizations for a newer Kubernetes than OLDEST: deploy/dra's DeviceClasses need resource.k8s.io/v1 with
#: extendedResourceName (beta in 1.36).
NEWER_THAN_OLDEST = {"dra": "1.36.0"}
VALIDATIONS = [(k, v) for k in KUSTOMIZATIONS for v in sorted({NEWER_THAN_OLDEST.get(k, OLDEST), VERSIONS[-1]})]
#: Kinds of the prometheus-operator (deploy/components/monitoring): checked against its CRDs, not Kubernetes'.
OPERATOR_KINDS = {"PodMonitor", "PrometheusRule"}


def test_the_expected_kustomizations_exist() -> None:
    assert KUSTOMIZATIONS == ["admission", "base", "components/monitoring", "dra", "examples", "overlays/cdi-off",
                              "overlays/irq-steering", "overlays/monitoring", "overlays/node-group-large"]


@pytest.mark.parametrize(("kustomization", "version"), VALIDATIONS)
def test_every_object_validates_strictly(kustomization: str, version: str) -> None:
    rendered = render(kustomization)
    assert rendered, f"{kustomization} renders nothing"
    for obj in rendered:
        if obj["kind"] in OPERATOR_KINDS:
            validate_operator_object(obj)
        else:
            kubernetes_validate.validate(obj, version, strict=True)


def test_strict_validation_rejects_unknown_fields_and_retired_apis() -> None:
    """The validator the tests above rely on does fail: an unknown field, an API version gone since 1.16."""
    (daemonset,) = objects("DaemonSet", "base")
    broken = yaml.safe_load(yaml.safe_dump(daemonset))
    broken["spec"]["template"]["spec"]["containers"][0]["privilegd"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, OLDEST, strict=True)
    retired = dict(daemonset, apiVersion="extensions/v1beta1")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(retired, OLDEST, strict=True)


@pytest.mark.parametrize(("where", "spec"), list(all_pod_specs()))
def test_no_workload_is_privileged_or_in_a_host_namespace(where: str, spec: dict[str, Any]) -> None:
    for field in ("hostPID", "hostNetwork", "hostIPC"):
        assert not spec.get(field), f"{where}: {field}"
    for container in containers(spec):
        context = container.get("securityContext", {})
        assert context.get("privileged") is not True, f"{where}/{container['name']}: privileged"
        assert context.get("allowPrivilegeEscalation") is False, f"{where}/{container['name']}"
        assert context.get("readOnlyRootFilesystem") is True, f"{where}/{container['name']}"
        # Nothing remains: the daemon writes only root-owned host directories as their owner (uid 0).
        assert context.get("capabilities") == {"drop": ["ALL"]}, f"{where}/{container['name']}"
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where


@pytest.mark.parametrize(("where", "spec"), list(all_pod_specs()))
def test_every_container_has_cpu_and_memory_requests_and_limits(where: str, spec: dict[str, Any]) -> None:
    for container in containers(spec):
        resources = container["resources"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= resources[kind].keys(), f"{where}/{container['name']} {kind}"


@pytest.mark.parametrize(("where", "spec"), list(all_pod_specs()))
def test_no_host_proc_anywhere_but_the_irq_masks_of_the_irq_steering_overlay(where: str, spec: dict[str, Any]) -> None:
    allowed = {"/proc/irq"} if where.startswith("overlays/irq-steering:") else set()
    for volume in spec.get("volumes", []):
        path = volume.get("hostPath", {}).get("path", "")
        assert path in allowed or not (path == "/proc" or path.startswith("/proc/")), f"{where}: hostPath {path}"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_the_api_permissions_are_nodes_and_dra_slices_each_with_the_policy_narrowing_it(kustomization: str) -> None:
    """deploy/admission alone grants anything to cmk-system's service accounts: get and patch nodes
    (untaint.yaml) and DRA mode's slices and claims (dra.yaml), each role held by a policy of its name
    bound with Deny that matches exactly those accounts."""
    rendered = render(kustomization)
    rbac = sorted((o["kind"], o["metadata"]["name"]) for o in rendered if o["kind"] in RBAC_KINDS)
    if kustomization != "admission":
        assert not rbac
    else:
        names = ("cmk-deviceplugin-dra", "cmk-deviceplugin-untaint")
        assert rbac == [(kind, name) for kind in ("ClusterRole", "ClusterRoleBinding") for name in names]
        rules = {role["metadata"]["name"]: role["rules"] for role in objects("ClusterRole", kustomization)}
        assert rules == {
            "cmk-deviceplugin-untaint": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
            "cmk-deviceplugin-dra": [
                {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
                 "verbs": ["get", "list", "watch", "create", "update", "delete"]},
                {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]}]}
        for binding in objects("ClusterRoleBinding", kustomization):
            (group,) = [s["name"] for s in binding["subjects"]]
            assert group == "system:serviceaccounts:cmk-system"
            (policy,) = [p for p in objects("ValidatingAdmissionPolicy", kustomization)
                         if p["metadata"]["name"] == binding["roleRef"]["name"]]
            assert [c["expression"] for c in policy["spec"]["matchConditions"]] == [f"'{group}' in request.userInfo.groups"]
            assert policy["spec"]["failurePolicy"] == "Fail"
            assert any(b["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
                       for b in objects("ValidatingAdmissionPolicyBinding", kustomization))
    for account in objects("ServiceAccount", kustomization):
        assert account["automountServiceAccountToken"] is False
    for _, spec in all_pod_specs():
        assert spec["automountServiceAccountToken"] is False


@pytest.mark.parametrize("kustomization", DAEMON_KUSTOMIZATIONS)
def test_daemonset_rolls_out_one_node_at_a_time_without_surge(kustomization: str) -> None:
    (daemonset,) = objects("DaemonSet", kustomization)
    strategy = daemonset["spec"]["updateStrategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}


@pytest.mark.parametrize("kustomization", DAEMON_KUSTOMIZATIONS)
def test_daemonset_runs_only_on_prepared_nodes_as_node_critical(kustomization: str) -> None:
    (daemonset,) = objects("DaemonSet", kustomization)
    spec = pod_spec(daemonset)
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["nodeSelector"]["cmk.intel.com/cpu-pools"]
    (account,) = objects("ServiceAccount", kustomization)
    assert spec["serviceAccountName"] == account["metadata"]["name"]


@pytest.mark.parametrize("kustomization", DAEMON_KUSTOMIZATIONS)
def test_daemon_mounts_kubelet_dirs_install_dir_and_nfd_dir_but_not_host_sys(kustomization: str) -> None:
    (daemonset,) = objects("DaemonSet", kustomization)
    spec = pod_spec(daemonset)
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: m for m in daemon_container(kustomization)["volumeMounts"]}
    by_host = {host_paths[m["name"]]: m for m in mounts.values() if m["name"] in host_paths}
    assert by_host["/var/lib/kubelet/device-plugins"].get("readOnly") is not True
    assert by_host["/opt/bin"]["readOnly"] is True
    assert by_host["/var/lib/kubelet/pod-resources"]["readOnly"] is True
    assert by_host["/etc/kubernetes/node-feature-discovery/features.d"].get("readOnly") is not True
    # DRA mode: the kubelet dials the paths the daemon names, so each is mounted where it is on the host
    for kubelet_dir in ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"):
        (volume,) = [v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == kubelet_dir]
        assert volume["hostPath"]["type"] == "DirectoryOrCreate"
        assert mounts[kubelet_dir]["name"] == volume["name"] and not mounts[kubelet_dir].get("readOnly")
    # the container's own /sys is the real sysfs: kernel CPU uevents are taken only there; only the host's
    # cgroup tree is laid over its fs/cgroup, read-only down to v1's per-controller mounts
    assert "/sys" not in by_host and [m for m in mounts if m.startswith("/sys")] == ["/sys/fs/cgroup"]
    cgroup = mounts["/sys/fs/cgroup"]
    assert host_paths[cgroup["name"]] == "/sys/fs/cgroup"
    assert (cgroup["readOnly"], cgroup["recursiveReadOnly"]) == (True, "IfPossible")
    assert not [arg for arg in daemon_container(kustomization)["args"] if arg.startswith("--sysfs-root")]
    (install,) = spec["initContainers"]
    assert install["args"][0] == "install"
    install_mounts = {m["mountPath"]: m for m in install["volumeMounts"]}
    assert host_paths[install_mounts["/opt/bin"]["name"]] == "/opt/bin" and not install_mounts["/opt/bin"].get("readOnly")
    # the node-wide hook: its declaration into the runtime's hooks.d, its record planned from the daemon's config
    hooks = install_mounts["/etc/containers/oci/hooks.d"]
    assert host_paths[hooks["name"]] == "/etc/containers/oci/hooks.d" and not hooks.get("readOnly")
    assert install_mounts["/etc/cmk"]["name"] == mounts["/etc/cmk"]["name"]
    assert install["args"][1:] == ["--install-dir", "/opt/bin", "--hooks-dir", "/etc/containers/oci/hooks.d",
                                   "--config", "/etc/cmk/config.yaml"]


def test_the_irq_steering_overlay_steers_exclusive_through_the_hosts_irq_masks_and_irqbalance() -> None:
    base, steering = daemon_container("base"), daemon_container("overlays/irq-steering")
    assert not any(arg.startswith("--irq-") for arg in base["args"])
    assert steering["args"] == [*base["args"], "--irq-dir=/host/proc/irq", "--irq-steering=exclusive"]
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in steering["volumeMounts"]}
    assert mounts["/host/proc/irq"] is False and "/run/irqbalance" in mounts
    assert steering["securityContext"] == base["securityContext"]  # still no capability, not privileged


def test_cdi_dir_is_mounted_in_base_and_dropped_with_cdi_off() -> None:
    base, off = daemon_container("base"), daemon_container("overlays/cdi-off")
    assert "--cdi-dir=/var/run/cdi" in base["args"]
    assert "/var/run/cdi" in {m["mountPath"] for m in base["volumeMounts"]}
    assert "--no-cdi" in off["args"]
    assert not [arg for arg in off["args"] if arg.startswith("--cdi-dir")]
    assert "/var/run/cdi" not in {m["mountPath"] for m in off["volumeMounts"]}
    (daemonset,) = objects("DaemonSet", "overlays/cdi-off")
    assert "cdi" not in {v["name"] for v in pod_spec(daemonset)["volumes"]}


def test_node_group_overlay_is_a_separate_daemonset_with_its_own_pool_layout() -> None:
    (base,) = objects("DaemonSet", "base")
    (large,) = objects("DaemonSet", "overlays/node-group-large")
    assert base["metadata"]["name"] != large["metadata"]["name"]
    base_selector = base["spec"]["selector"]["matchLabels"]
    large_selector = large["spec"]["selector"]["matchLabels"]
    # a DaemonSet whose selector matched the other's pods would adopt or delete them
    assert base_selector.items() - large_selector.items() or large_selector.items() - base_selector.items()
    assert not (large_selector.items() <= base["spec"]["template"]["metadata"]["labels"].items())
    assert pod_spec(base)["nodeSelector"]["cmk.intel.com/cpu-pools"] == "default"
    assert pod_spec(large)["nodeSelector"]["cmk.intel.com/cpu-pools"] == "large"
    base_config, large_config = pool_config("base"), pool_config("overlays/node-group-large")
    assert base_config["data"] != large_config["data"]
    (volume,) = [v for v in pod_spec(large)["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == large_config["metadata"]["name"]
    assert not objects("Namespace", "overlays/node-group-large"), "the base owns the namespace"


@pytest.mark.parametrize("kustomization", DAEMON_KUSTOMIZATIONS)
def test_probes_run_cmk_probe_on_the_daemons_kubelet_dir(kustomization: str) -> None:
    daemon = daemon_container(kustomization)
    daemon_args = apply_config(build_parser().parse_args(daemon["args"]), {})
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = daemon[probe]["exec"]["command"]
        assert command[:2] == ["cmk", "probe"], probe
        args = build_parser().parse_args(command[1:])
        assert args.command == "probe"
        assert args.kubelet_dir == daemon_args.kubelet_dir, probe
        assert str(args.kubelet_dir) in {m["mountPath"] for m in daemon["volumeMounts"]}


@pytest.mark.parametrize("kustomization", DAEMON_KUSTOMIZATIONS)
def test_daemon_args_are_flags_cmk_device_plugin_accepts(kustomization: str) -> None:
    daemon = daemon_container(kustomization)
    args = daemon["args"]
    assert args[0] == "device-plugin"
    parsed = build_parser().parse_args(args)
    assert parsed.command == "device-plugin"
    (install,) = pod_spec(objects("DaemonSet", kustomization)[0])["initContainers"]
    assert build_parser().parse_args(install["args"]).install_dir == Path(parsed.install_dir)


@pytest.mark.parametrize("kustomization", DAEMON_KUSTOMIZATIONS)
def test_pool_config_is_a_valid_daemon_config(kustomization: str) -> None:
    config = pool_config(kustomization)
    values = parse_config(yaml.safe_load(config["data"]["config.yaml"]), kustomization)
    assert values, "the config sets nothing"


@pytest.mark.parametrize("kustomization", DAEMON_KUSTOMIZATIONS)
def test_daemon_paths_are_where_they_are_mounted(kustomization: str) -> None:
    daemon = daemon_container(kustomization)
    mounts = {m["mountPath"] for m in daemon["volumeMounts"]}
    for arg in daemon["args"]:
        if arg.startswith(("--kubelet-dir=", "--plugins-registry-dir=", "--plugins-dir=", "--install-dir=", "--cdi-dir=", "--config=",
                           "--pod-resources-socket=", "--nfd-features-dir=", "--irq-dir=")):
            path = arg.split("=", 1)[1]
            assert any(path == m or path.startswith(m + "/") for m in mounts), arg


def _examples() -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects("Pod", "examples")}


def test_examples_have_no_service_account_and_no_host_paths() -> None:
    pods = _examples()
    assert set(pods) == {"cmk-three-pools", "cmk-cdi-only", "cmk-guaranteed-exclusive", "cmk-exclusive-and-shared"}
    for name, pod in pods.items():
        spec = pod["spec"]
        assert "serviceAccountName" not in spec, name
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], name
        assert spec["securityContext"]["runAsNonRoot"] is True, name


def _pool_resources(container: dict[str, Any]) -> list[str]:
    return [POOL_OF_RESOURCE[r] for r in container["resources"]["limits"] if r in POOL_OF_RESOURCE]


def _pinner_pool(container: dict[str, Any]) -> str | None:
    command = container["command"]
    if command[:2] != ["/opt/bin/cmk", "isolate"]:
        return None
    (pool,) = [arg.split("=", 1)[1] for arg in command if arg.startswith("--pool=")]
    return pool


def test_three_pool_example_pins_each_container_to_the_pool_it_requests() -> None:
    spec = _examples()["cmk-three-pools"]["spec"]
    pools = []
    for container in spec["containers"]:
        (requested,) = _pool_resources(container)
        assert _pinner_pool(container) == requested, shlex.join(container["command"])
        assert container["resources"]["requests"] == container["resources"]["limits"] or requested != "exclusive"
        pools.append(requested)
    assert sorted(pools) == sorted([str(Pool.EXCLUSIVE), str(Pool.SHARED), str(Pool.INFRA)])


def test_cdi_example_never_calls_the_pinner() -> None:
    (container,) = _examples()["cmk-cdi-only"]["spec"]["containers"]
    assert _pool_resources(container) == [str(Pool.EXCLUSIVE)]
    assert _pinner_pool(container) is None
    assert not any("cmk" in part for part in container["command"])


def test_guaranteed_example_requests_the_cpu_of_its_cores() -> None:
    (container,) = _examples()["cmk-guaranteed-exclusive"]["spec"]["containers"]
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]  # Guaranteed QoS
    cores = int(resources["limits"][RESOURCE_NAMES[Pool.EXCLUSIVE]])
    assert cores == 2
    assert int(resources["limits"]["cpu"]) == 2 * cores  # both threads of each SMT core
    assert _pinner_pool(container) == str(Pool.EXCLUSIVE)


def test_exclusive_and_shared_example_runs_its_main_process_on_the_core_and_a_helper_on_the_shared_cpus() -> None:
    (container,) = _examples()["cmk-exclusive-and-shared"]["spec"]["containers"]
    assert sorted(_pool_resources(container)) == [str(Pool.EXCLUSIVE), str(Pool.SHARED)]
    assert _pinner_pool(container) == str(Pool.EXCLUSIVE)
    script = container["command"][-1]
    assert shlex.split(script)[:3] == ["/opt/bin/cmk", "isolate", f"--pool={Pool.SHARED}"]
    resources = container["resources"]
    cores = int(resources["limits"][RESOURCE_NAMES[Pool.EXCLUSIVE]])
    # the cores' threads (2 on SMT) requested; the kept quota's limit above them by the shared time
    assert int(resources["requests"]["cpu"]) == 2 * cores < int(resources["limits"]["cpu"])


def test_the_pinner_docs_show_the_exclusive_and_shared_example_as_shipped() -> None:
    docs = (ROOT / "docs/user/pinner.md").read_text()
    section = docs[docs.index("## Exclusive and shared CPUs in one container"):]
    shown = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    lines = (DEPLOY / "examples/pod-exclusive-and-shared.yaml").read_text().splitlines(keepends=True)
    assert shown in "".join(line for line in lines if not line.lstrip().startswith("#"))  # as shipped, bar comments


@pytest.mark.parametrize("kustomization", ["base", "overlays/node-group-large"])
def test_only_prometheus_reaches_the_metrics_port(kustomization: str) -> None:
    daemons = objects("DaemonSet", kustomization)
    policies = objects("NetworkPolicy", kustomization)
    assert len(policies) == 1
    policy = policies[0]["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    selected = policy["podSelector"]["matchLabels"].items()
    for daemon in daemons:  # every daemon pod is selected, so all its other ingress is denied
        assert selected <= daemon["spec"]["template"]["metadata"]["labels"].items()
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    (source,) = rule["from"]
    assert source["namespaceSelector"]["matchLabels"] and source["podSelector"]["matchLabels"]
    ports = {port["name"] for daemon in daemons for c in daemon["spec"]["template"]["spec"]["containers"]
             for port in c.get("ports", [])}
    assert ports == {"metrics"}


# --- the traps of a first deployment (issue 22) ------------------------------------------------

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(DEPLOY.rglob("*.md"))]
NOT_READY_TAINT = {"key": "cmk.intel.com/pools-not-ready", "effect": "NoSchedule"}


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Kubernetes' own matching: same key (or an empty key with Exists), same effect (or none), value if Equal."""
    for t in tolerations:
        key_ok = t.get("key") == taint["key"] or (not t.get("key") and t.get("operator") == "Exists")
        effect_ok = t.get("effect") in (None, "", taint["effect"])
        value_ok = t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", "")
        if key_ok and effect_ok and value_ok:
            return True
    return False


@pytest.mark.parametrize("kustomization", DAEMON_KUSTOMIZATIONS)
def test_the_daemon_tolerates_the_taint_the_docs_advise_until_the_pools_register(kustomization: str) -> None:
    """The docs advise a NoSchedule taint until the pools register; a daemon not tolerating it never registers them."""
    taint = f"{NOT_READY_TAINT['key']}:{NOT_READY_TAINT['effect']}"
    assert any(taint in doc.read_text() for doc in DOCS), f"no doc names the taint {taint}"
    (daemonset,) = objects("DaemonSet", kustomization)
    assert _tolerates(pod_spec(daemonset).get("tolerations", []), NOT_READY_TAINT)
    assert not _tolerates(pod_spec(daemonset).get("tolerations", []), {"key": "other", "effect": "NoSchedule"})


@pytest.mark.parametrize("kustomization", DAEMON_KUSTOMIZATIONS)
def test_the_daemon_pods_carry_the_recommended_name_label(kustomization: str) -> None:
    (daemonset,) = objects("DaemonSet", kustomization)
    assert daemonset["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "cmk-deviceplugin"


def test_no_node_groups_daemonset_selects_another_groups_pods() -> None:
    groups = {k: objects("DaemonSet", k)[0] for k in ("base", "overlays/node-group-large")}
    for name, selecting in groups.items():
        selector = selecting["spec"]["selector"]["matchLabels"].items()
        for other, selected in groups.items():
            matches = selector <= selected["spec"]["template"]["metadata"]["labels"].items()
            assert matches == (name == other), (name, other)


def test_the_node_group_overlay_keeps_the_prometheus_selector_of_the_network_policy() -> None:
    """includeSelectors once added the group label to the Prometheus podSelector: no real Prometheus matched."""
    def source(kustomization: str) -> dict[str, Any]:
        (policy,) = objects("NetworkPolicy", kustomization)
        (rule,) = policy["spec"]["ingress"]
        (found,) = rule["from"]
        return dict(found)

    assert source("overlays/node-group-large") == source("base")
    assert source("base")["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}


def test_no_doc_execs_into_an_arbitrary_nodes_daemon() -> None:
    """``kubectl exec ds/NAME`` picks any node's pod: a node's own plan needs its own pod."""
    for doc in DOCS:
        text = doc.read_text()
        for picked in ("exec ds/", "exec daemonset/", "exec -it ds/"):
            assert picked not in text, f"{doc.relative_to(ROOT)}: kubectl {picked}... runs on an arbitrary node"


def test_every_file_the_prometheus_files_name_exists() -> None:
    import re

    here = DEPLOY / "prometheus"
    for path in sorted(here.glob("*.yaml")):
        for named in re.findall(r"[\w*./-]+\.ya?ml\b", path.read_text()):
            if "*" in named or named != named.lower() or named == "prometheus.yml":
                continue  # a pattern (*-rules.yaml, NAME-rules.yaml) or Prometheus's own file
            assert (here / named).exists() or (ROOT / named).exists(), f"{path.name} names {named}, which does not exist"
