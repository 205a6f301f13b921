"""deploy/admission: the CEL policies refuse wrong pods with a message naming the fix, and pass the rest.

Every expression is the policy file's own, as ``kubectl kustomize`` renders it, run by a real CEL
engine (cel-expr-python) through tests/support/admission.py, which does what the API server does around it.
The cluster is what the README deploys: deploy/admission, deploy/base and the node-group-large
overlay; tables that need a node group without SMT add one more group ConfigMap the way an overlay
would (a copy of the base's with other data).
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from deviceplugin.model.answers import ENV_NAMES
from deviceplugin.model.cdispec import CONFINED_ENV
from deviceplugin.model.pinnercontract import ENV_ASSIGNED, ENV_ASSIGNED_MASK
from tests.support.admission import (
    ACCEPTED,
    CPU_POLICY,
    DEPLOY,
    ENV_FIX,
    EXCLUSIVE,
    POD_POLICY,
    QUANTITY_FIELD,
    REFUSED,
    ROOT,
    RUNTIME_CLASS_FIX,
    SHORT_PREFIX_FIX,
    EvaluationError,
    NotPorted,
    RejectedByApi,
    Request,
    check_literals,
    compile_expression,
    container,
    cores,
    cpu_fix,
    denials,
    deployed,
    kubectl_error,
    parse_quantity,
    pod,
    render,
)

ADMISSION_DOCS = ROOT / "docs/user/admission.md"  # where the refusal and the RuntimeClass patch are shown
VERSIONS = sorted({"1.30.0", kubernetes_validate.latest_version()})


def env_names_the_node_sets() -> set[str]:
    """Every CMK_CPUS_*/CMK_CDI_* name in the daemon's and pinners' sources (found by scanning, so a new one counts)."""
    names: set[str] = set()
    for folder in ("deviceplugin", "pinner"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".c", ".h"}:
                names |= set(re.findall(r"\bCMK_(?:CPUS|CDI)_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    return names


def test_the_scan_finds_every_name_the_daemon_and_pinner_set() -> None:
    expected = {*ENV_NAMES.values(), CONFINED_ENV.split("=")[0], ENV_ASSIGNED, ENV_ASSIGNED_MASK}
    assert len(expected) == 7
    assert expected <= env_names_the_node_sets()


@pytest.mark.parametrize("name", sorted(env_names_the_node_sets()))
def test_a_container_setting_a_variable_the_node_sets_is_refused(name: str) -> None:
    found = denials(deployed(), Request(pod(container(env=[name]))))
    assert found == [POD_POLICY + f"container app sets {name}" + ENV_FIX]


@pytest.mark.parametrize("name", ["CMK_CPUS_EXCLUSIVE", "CMK_CDI_CONFINED"])
def test_an_ephemeral_container_setting_one_is_refused(name: str) -> None:
    debug = {"name": "debug", "image": "busybox:1.36", "env": [{"name": name, "value": "0-63"}]}
    running = pod(container(**cores(1, "2")))
    running["spec"]["ephemeralContainers"] = [debug]
    request = Request(running, operation="UPDATE", subresource="ephemeralcontainers")
    assert denials(deployed(), request) == [POD_POLICY + f"ephemeral container debug sets {name}" + ENV_FIX]
    debug["env"] = [{"name": "DEBUG", "value": "1"}]
    assert denials(deployed(), request) == []


def test_a_pod_admitted_without_seccomp_before_the_rule_can_still_be_debugged() -> None:
    """securityContext is immutable, so the ways out are checked at CREATE only; a debug container's env still is."""
    running = pod(container(**cores(1, "2")), security={})
    running["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox:1.36"}]
    assert denials(deployed(), Request(running, operation="UPDATE", subresource="ephemeralcontainers")) == []
    running["spec"]["ephemeralContainers"][0]["envFrom"] = [{"prefix": "C", "configMapRef": {"name": "x"}}]
    assert denials(deployed(), Request(running, operation="UPDATE", subresource="ephemeralcontainers")) == [
        POD_POLICY + "ephemeral container debug imports variables named C*" + SHORT_PREFIX_FIX.format(prefix="C")]


def with_runtime_classes(names: str) -> list[dict[str, Any]]:
    """The deployed objects with the policy's runtimeClasses variable patched, as a kustomize patch of it would."""
    objects = copy.deepcopy(deployed())
    (policy,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] ==
                 "cmk-pool-containers"]
    (variable,) = [v for v in policy["spec"]["variables"] if v["name"] == "runtimeClasses"]
    variable["expression"] = names
    return objects


def test_a_runtime_class_the_policy_lists_is_accepted_for_a_pool_pod() -> None:
    listed = with_runtime_classes("['runc-cmk', 'crun-cmk']")
    assert denials(listed, Request(pod(container(**cores(1, "2")), runtimeClassName="crun-cmk"))) == []
    assert denials(listed, Request(pod(container(**cores(1, "2")), runtimeClassName="kata"))) == [
        POD_POLICY + "pod requests a cmk.intel.com/* resource and names runtimeClassName kata" + RUNTIME_CLASS_FIX]


def test_a_variable_from_a_field_ref_counts_too() -> None:
    app = container()
    app["env"] = [{"name": "CMK_CPUS_INFRA", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    assert denials(deployed(), Request(pod(app))) == [POD_POLICY + "container app sets CMK_CPUS_INFRA" + ENV_FIX]


@pytest.mark.parametrize(("case", "manifest", "objects"), ACCEPTED, ids=[row[0] for row in ACCEPTED])
def test_accepted(case: str, manifest: dict[str, Any], objects: Any) -> None:
    assert denials(objects(), Request(manifest)) == []


@pytest.mark.parametrize(("case", "manifest", "objects", "expected"), REFUSED, ids=[row[0] for row in REFUSED])
def test_refused_with_the_fix(case: str, manifest: dict[str, Any], objects: Any, expected: list[str]) -> None:
    assert denials(objects(), Request(manifest)) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_table_pods_are_valid_pods(version: str) -> None:
    for _, manifest, *_ in ACCEPTED + REFUSED:
        kubernetes_validate.validate(manifest, version, strict=True)


def _example_pods() -> list[dict[str, Any]]:
    return [o for o in render("examples") if o["kind"] == "Pod"]


@pytest.mark.parametrize("example", _example_pods(), ids=lambda o: o["metadata"]["name"])
def test_the_shipped_examples_pass(example: dict[str, Any]) -> None:
    assert denials(deployed(), Request(example)) == []


@pytest.mark.parametrize("kustomization", ["base", "overlays/cdi-off", "overlays/node-group-large"])
def test_the_daemon_pod_itself_passes(kustomization: str) -> None:
    (daemonset,) = [o for o in render(kustomization) if o["kind"] == "DaemonSet"]
    template = daemonset["spec"]["template"]
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "daemon", **template["metadata"]},
                "spec": template["spec"]}
    assert denials(deployed(), Request(manifest, namespace="cmk-system")) == []


def test_in_place_resize_is_checked_and_other_updates_are_not() -> None:
    wrong = pod(container(**cores(1, "1")), group="default")
    assert denials(deployed(), Request(wrong, operation="UPDATE", subresource="resize")) == [
        cpu_fix("app", 1, 2, no_group=False)]
    assert denials(deployed(), Request(wrong, operation="UPDATE")) == []  # a label change of a running pod


def test_a_resize_through_an_update_of_the_pod_itself_before_1_33_is_checked() -> None:
    """1.27-1.32 with InPlacePodVerticalScaling resize by UPDATE of ``pods``; an unchanged spec is not re-checked."""
    right = pod(container(**cores(1, "2")), group="default")
    resized = pod(container(**cores(1, "1")), group="default")
    assert denials(deployed(), Request(resized, operation="UPDATE", old=right)) == [cpu_fix("app", 1, 2, no_group=False)]
    assert denials(deployed(), Request(right, operation="UPDATE", old=resized)) == []  # resized back to fit
    labelled = copy.deepcopy(resized)
    labelled["metadata"]["labels"] = {"tier": "gold"}  # admitted before the policy: its labels may still change
    assert denials(deployed(), Request(labelled, operation="UPDATE", old=resized)) == []


def test_a_group_per_daemonset_names_the_daemonsets_node_label() -> None:
    for kustomization in ("base", "overlays/cdi-off", "overlays/node-group-large"):
        rendered = render(kustomization)
        (daemonset,) = [o for o in rendered if o["kind"] == "DaemonSet"]
        groups = [o for o in rendered if o["kind"] == "ConfigMap"
                  and o["metadata"].get("labels", {}).get("cmk.intel.com/admission-params") == "node-group"]
        assert len(groups) == 1, kustomization
        (group,) = groups
        # no hash suffix: an old copy would stay behind and still be a parameter
        assert group["metadata"]["name"] in {"cmk-node-group", "cmk-node-group-large"}
        label = daemonset["spec"]["template"]["spec"]["nodeSelector"]["cmk.intel.com/cpu-pools"]
        assert group["data"]["node-group"] == label, kustomization
        assert int(group["data"]["threads-per-core"]) >= 1
        (binding,) = [o for o in render("admission") if o["metadata"]["name"] == "cmk-exclusive-cpu"
                      and o["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert group["metadata"]["namespace"] == binding["spec"]["paramRef"]["namespace"]
        assert binding["spec"]["paramRef"]["selector"]["matchLabels"].items() <= group["metadata"]["labels"].items()


def test_the_policies_are_cluster_scoped_objects_without_a_namespace() -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in render("admission"))
    roles = ["cmk-deviceplugin-dra", "cmk-deviceplugin-untaint"]
    policies = [*roles, "cmk-exclusive-cpu", "cmk-pool-containers"]
    assert kinds == [*(("ClusterRole", name) for name in roles), *(("ClusterRoleBinding", name) for name in roles),
                     *(("ValidatingAdmissionPolicy", name) for name in policies),
                     *(("ValidatingAdmissionPolicyBinding", name) for name in policies)]
    assert all("namespace" not in o["metadata"] for o in render("admission"))


def test_every_expression_compiles_and_none_reads_the_harness_quantity_field() -> None:
    texts = []
    for policy in (o for o in render("admission") if o["kind"] == "ValidatingAdmissionPolicy"):
        spec = policy["spec"]
        texts += [v["expression"] for v in spec.get("variables", [])]
        texts += [v[key] for v in spec["validations"] for key in ("expression", "messageExpression") if key in v]
        texts += [v["expression"] for v in spec.get("matchConditions", [])]
    assert len(texts) == 40
    for text in texts:
        compile_expression(text)
        assert QUANTITY_FIELD not in text


def test_the_harness_is_not_lenient() -> None:
    """What the API server's CEL refuses, the harness refuses too."""
    with pytest.raises(EvaluationError, match="mixed list literal"):
        check_literals("[1, 'a'].size() > 0")
    with pytest.raises(EvaluationError, match="map literal"):
        check_literals("{'a': 1}.size() > 0")
    with pytest.raises(EvaluationError, match="does not compile"):
        compile_expression("quantity('1').add(1)")  # not in the port: refused, not guessed
    with pytest.raises(EvaluationError, match="cannot convert value to integer"):
        compile_expression("quantity('1500m').asInteger()")({})
    with pytest.raises(EvaluationError, match="regular expression"):
        compile_expression("quantity('two')")({})
    with pytest.raises(RejectedByApi, match="must be an integer"):
        denials(deployed(), Request(pod(container(limits={EXCLUSIVE: "1500m"}))))
    with pytest.raises(RejectedByApi, match="less than or equal"):
        denials(deployed(), Request(pod(container(limits={"cpu": "1"}, requests={"cpu": "2"}))))
    with pytest.raises(NotPorted):
        parse_quantity("1.5Ki")


@pytest.mark.parametrize(("text", "canonical", "integer"), [
    ("2", "2", 2), ("2000m", "2", None), ("1.5", "1500m", None), ("100m", "100m", None), ("1000", "1k", 1000),
    ("1k", "1k", 1000), ("4e0", "4e0", 4), ("1Ki", "1Ki", 1024), ("0.5", "500m", None), ("0", "0", 0),
])
def test_quantities_parse_and_print_as_the_api_server_does(text: str, canonical: str, integer: int | None) -> None:
    """Values from apimachinery's own quantity_test.go: the canonical form is what a policy sees."""
    quantity = parse_quantity(text)
    assert quantity.string() == canonical
    assert quantity.as_int64() == integer  # AsInt64 never reduces a negative scale: 2000m is not an int64 as parsed
    assert compile_expression(f"quantity('{canonical}').isInteger()")({}) is (parse_quantity(canonical).as_int64()
                                                                               is not None)


def test_a_parameter_not_found_with_deny_refuses_every_pod() -> None:
    """Why the binding says Allow: with Deny, losing the ConfigMaps would stop every pod in the cluster."""
    objects = [o for o in deployed() if o["kind"] != "ConfigMap"]
    strict = copy.deepcopy(objects)
    for obj in strict:
        if obj["kind"] == "ValidatingAdmissionPolicyBinding" and "paramRef" in obj["spec"]:
            obj["spec"]["paramRef"]["parameterNotFoundAction"] = "Deny"
    assert denials(strict, Request(pod(container()))) == [
        CPU_POLICY + "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"]
    assert denials(objects, Request(pod(container()))) == []


def test_the_docs_show_the_refusal_kubectl_prints() -> None:
    manifest = yaml.safe_load(DOCS_POD)
    request = Request(manifest)
    (denial, *_) = denials(deployed(), request)
    assert kubectl_error(request, denial) in ADMISSION_DOCS.read_text()
    assert DOCS_POD in ADMISSION_DOCS.read_text()
    manifest["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "2"  # 'cpu: "2" ... is accepted'
    assert denials(deployed(), Request(manifest)) == []


def test_the_docs_patch_of_the_runtime_classes_lists_them(tmp_path: Path) -> None:
    """The kustomize patch the admission docs show, rendered for real, makes the policy accept that RuntimeClass."""
    readme = ADMISSION_DOCS.read_text()
    patch = re.search(r"  ```yaml\n(  patches:\n.*?)  ```\n", readme, re.DOTALL)
    assert patch is not None
    text = "\n".join(line.removeprefix("  ") for line in patch.group(1).splitlines())
    base = os.path.relpath(DEPLOY / "admission", tmp_path)  # kustomize takes no absolute resource directory
    (tmp_path / "kustomization.yaml").write_text(f"resources: [{base}]\n{text}\n")
    proc = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    patched = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    objects = [*patched, *render("base")]
    assert denials(objects, Request(pod(container(**cores(1, "2")), runtimeClassName="runc-cmk"))) == []
    assert denials(deployed(), Request(pod(container(**cores(1, "2")), runtimeClassName="runc-cmk"))) != []


DOCS_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: one-core
spec:
  nodeSelector: {cmk.intel.com/cpu-pools: default}
  securityContext: {seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: app
      image: busybox:1.36
      command: [/opt/bin/cmk, isolate, --pool=exclusive, sleep, --, inf]
      resources:
        limits: {cmk.intel.com/exclusive-cores: "1", cpu: "1", memory: 16Mi}
"""


def test_table_sizes() -> None:
    """The tables cover each rule both ways (the counts go in the closing note)."""
    assert len(ACCEPTED) >= 20 and len(REFUSED) >= 20
