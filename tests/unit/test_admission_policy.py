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
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from deviceplugin.host.cdi import CONFINED_ENV
from deviceplugin.model.answers import ENV_NAMES
from pinner.contract import ENV_ASSIGNED, ENV_ASSIGNED_MASK
from tests.support.admission import (
    QUANTITY_FIELD,
    EvaluationError,
    NotPorted,
    RejectedByApi,
    Request,
    check_literals,
    compile_expression,
    denials,
    kubectl_error,
    parse_quantity,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ADMISSION_DOCS = ROOT / "docs/user/admission.md"  # where the refusal and the RuntimeClass patch are shown
VERSIONS = sorted({"1.30.0", kubernetes_validate.latest_version()})
EXCLUSIVE, NON_ISOLCPUS = "cmk.intel.com/exclusive-cores", "cmk.intel.com/exclusive-non-isolcpus-cores"
SHARED, INFRA = "cmk.intel.com/shared", "cmk.intel.com/infra"
CPU_POLICY = "ValidatingAdmissionPolicy 'cmk-exclusive-cpu' with binding 'cmk-exclusive-cpu' denied request: "
POD_POLICY = "ValidatingAdmissionPolicy 'cmk-pool-containers' with binding 'cmk-pool-containers' denied request: "
NO_GROUP = "; the pod names no node group (nodeSelector cmk.intel.com/cpu-pools), so it must fit every group"
ENV_FIX = " itself: remove it from env and envFrom; the device plugin sets CMK_CPUS_* and CMK_CDI_* for the CPUs the container holds"
RUNTIME_DEFAULT = {"seccompProfile": {"type": "RuntimeDefault"}}
POOL = " requests a cmk.intel.com/* resource and "
SHORT_PREFIX_FIX = (" through envFrom, and CMK_CPUS_* and CMK_CDI_* names begin with {prefix}: use a prefix that none of"
                    " them begins with, such as APP_")
NO_PREFIX_FIX = (POOL + "imports variables through envFrom without a prefix, so a key could be a CMK_CPUS_* or CMK_CDI_*"
                 " name: give each envFrom of it a prefix, such as APP_")
CAP_FIX = (": remove it from securityContext.capabilities.add; with it the container can remount its cgroup and leave its"
           " CPUs")
UNCONFINED_FIX = (POOL + "runs with seccomp Unconfined: set securityContext.seccompProfile.type to RuntimeDefault;"
                  " unfiltered, a root container can make the namespaces to remount its cgroup and leave its CPUs")
NO_SECCOMP_FIX = (POOL + "names no seccomp profile, which Kubernetes runs Unconfined unless the kubelet sets"
                  " seccompDefault: set securityContext.seccompProfile.type to RuntimeDefault in the pod or the container")
APPARMOR_FIX = (POOL + "runs with AppArmor Unconfined: remove that appArmorProfile (or the"
                " container.apparmor.security.beta.kubernetes.io annotation) so the runtime default profile forbids"
                " mounting its cgroup")
RUNTIME_CLASS_FIX = (", which cmk-pool-containers does not list: remove it, or add it to the policy variable runtimeClasses"
                     " once its handler runs the CDI and node-wide cmk hooks on every pool node")
PRIVILEGED_FIX = (" requests a cmk.intel.com/* resource and is privileged: remove privileged: true from its securityContext;"
                  " its CPUs arrive through the device plugin and the pinner needs no privilege, while a privileged"
                  " container can leave them")


@cache
def render(kustomization: str) -> tuple[dict[str, Any], ...]:
    proc = subprocess.run(["kubectl", "kustomize", str(DEPLOY / kustomization)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc)


def deployed() -> list[dict[str, Any]]:
    """The objects the README applies: the admission policies, the base and the large node group."""
    return [*render("admission"), *render("base"), *render("overlays/node-group-large")]


def group_config(name: str, threads: str) -> dict[str, Any]:
    """Another node group's parameters, as a copy of the base's ConfigMap (what an overlay renders)."""
    (base,) = [o for o in render("base") if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "cmk-node-group"]
    config = copy.deepcopy(base)
    config["metadata"]["name"] = f"cmk-node-group-{name}"
    config["data"] = {"node-group": name, "threads-per-core": threads}
    return config


def with_nosmt() -> list[dict[str, Any]]:
    return [*deployed(), group_config("nosmt", "1")]


def container(name: str = "app", *, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
              env: list[str] = (), env_from: list[str | None] = (), privileged: bool | None = None,
              security: dict[str, Any] | None = None) -> dict[str, Any]:
    """A container; an ``env_from`` entry of None has no prefix field at all; ``security`` is its securityContext."""
    result: dict[str, Any] = {"name": name, "image": "busybox:1.36"}
    if limits is not None or requests is not None:
        result["resources"] = {key: value for key, value in (("limits", limits), ("requests", requests))
                               if value is not None}
    if env:
        result["env"] = [{"name": item, "value": "0"} for item in env]
    if env_from:
        result["envFrom"] = [{"configMapRef": {"name": "app-config"}, **({} if prefix is None else {"prefix": prefix})}
                             for prefix in env_from]
    if privileged is not None or security is not None:
        result["securityContext"] = {**({} if privileged is None else {"privileged": privileged}), **(security or {})}
    return result


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] = (), group: str | None = None,
        security: dict[str, Any] | None = None, **spec_fields: Any) -> dict[str, Any]:
    """A pod whose securityContext is ``security`` (default: seccomp RuntimeDefault, which pool pods need)."""
    spec: dict[str, Any] = {"containers": list(containers), **spec_fields,
                            "securityContext": RUNTIME_DEFAULT if security is None else security}
    if not spec["securityContext"]:
        del spec["securityContext"]
    if init:
        spec["initContainers"] = list(init)
    if group is not None:
        spec["nodeSelector"] = {"cmk.intel.com/cpu-pools": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "workload", "namespace": "default"}, "spec": spec}


def annotated(manifest: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    manifest["metadata"]["annotations"] = annotations
    return manifest


def cores(n: int, cpu: Any, **extra: Any) -> dict[str, Any]:
    """Container resources: n exclusive cores with cpu requests = limits = ``cpu``."""
    return {"limits": {EXCLUSIVE: n, "cpu": cpu, **extra}}


def cpu_fix(name: str, held: int, want: int, threads: int = 2, group: str = "default", *, slot: bool = False,
            no_group: bool = True) -> str:
    if slot:
        fix = (f"container {name} holds {held} whole core(s) and a shared or infra slot: set its cpu requests to at"
               f" least {want}")
    else:
        fix = f"container {name} holds {held} whole core(s): set its cpu requests and limits both to {want}"
    return (CPU_POLICY + fix + f" ({held} x {threads} threads per core on node group {group}), so its CFS quota covers"
            " every thread of its cores" + (NO_GROUP if no_group else ""))


def every_group(name: str, held: int, want: int) -> list[str]:
    """A pod that names no group is checked by the ConfigMap of each group (default and large: 2 threads)."""
    return [cpu_fix(name, held, want), cpu_fix(name, held, want, group="large")]


# (case, pod, objects) that every policy lets through
ACCEPTED = [
    ("one core, cpu 2", pod(container(**cores(1, "2"))), deployed),
    ("two cores, cpu 4 as 4000m", pod(container(**cores(2, "4000m"))), deployed),
    ("two cores, cpu as a number", pod(container(**cores(2, 4))), deployed),
    ("one non-isolcpus core", pod(container(limits={NON_ISOLCPUS: 1, "cpu": "2"})), deployed),
    ("both core pools add up", pod(container(limits={EXCLUSIVE: 1, NON_ISOLCPUS: 1, "cpu": "4"})), deployed),
    ("requests given as well", pod(container(limits={EXCLUSIVE: 1, "cpu": "2"}, requests={EXCLUSIVE: 1, "cpu": "2"})),
     deployed),
    ("init container with its cores", pod(container(), init=[container("setup", **cores(1, "2"))]), deployed),
    ("no SMT group, one core, cpu 1", pod(container(**cores(1, "1")), group="nosmt"), with_nosmt),
    ("default group beside a no-SMT group", pod(container(**cores(1, "2")), group="default"), with_nosmt),
    ("large group", pod(container(**cores(3, "6")), group="large"), with_nosmt),
    ("cores and a shared slot, cpu above the cores", pod(container(limits={EXCLUSIVE: 1, SHARED: 1, "cpu": "3"},
                                                                   requests={"cpu": "2500m"})), deployed),
    ("fractional cpu beside a pinned container",
     pod(container(**cores(1, "2")), container("sidecar", limits={"cpu": "250m"})), deployed),
    ("shared slot, fractional cpu", pod(container(limits={SHARED: 1, "cpu": "1"}, requests={"cpu": "250m"})), deployed),
    ("infra slot, no cpu at all", pod(container(limits={INFRA: 1})), deployed),
    ("no cmk resource", pod(container(limits={"cpu": "500m"})), deployed),
    ("no resources at all", pod(container()), deployed),
    ("env that only looks alike", pod(container(env=["CMK_CPUS", "MY_CMK_CPUS_EXCLUSIVE", "CMK_SYSFS_ROOT",
                                                     "cmk_cpus_exclusive", "CMK_CDIX"])), deployed),
    ("envFrom with another prefix, or none, holding no pool", pod(container(env_from=["APP_", "", None])), deployed),
    ("envFrom with prefixes that begin no reserved name, holding a pool",
     pod(container(**cores(1, "2"), env_from=["APP_", "CMK_X", "CMK_CPX", "CMK_CPUSX", "CMK_CDIX"])), deployed),
    ("seccomp RuntimeDefault in the container only", pod(container(**cores(1, "2"), security=RUNTIME_DEFAULT),
                                                         security={}), deployed),
    ("seccomp Localhost (an admin's profile)",
     pod(container(**cores(1, "2")), security={"seccompProfile": {"type": "Localhost", "localhostProfile": "cmk.json"}}),
     deployed),
    ("a container overrides the pod's Unconfined seccomp",
     pod(container(**cores(1, "2"), security=RUNTIME_DEFAULT), security={"seccompProfile": {"type": "Unconfined"}}),
     deployed),
    ("no seccomp profile, holding no pool", pod(container(limits={"cpu": "1"}), security={}), deployed),
    ("Unconfined seccomp and AppArmor, SYS_ADMIN, holding no pool, beside a pinned one",
     pod(container(**cores(1, "2")), container("tool", security={
         "seccompProfile": {"type": "Unconfined"}, "appArmorProfile": {"type": "Unconfined"},
         "capabilities": {"add": ["SYS_ADMIN"]}})), deployed),
    ("harmless capabilities added, others dropped",
     pod(container(**cores(1, "2"), security={"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_NICE"],
                                                               "drop": ["ALL", "SYS_ADMIN"]}})), deployed),
    ("AppArmor RuntimeDefault", pod(container(**cores(1, "2"), security={"appArmorProfile": {"type": "RuntimeDefault"}})),
     deployed),
    ("a runtimeClassName, holding no pool", pod(container(), runtimeClassName="gvisor"), deployed),
    ("privileged container without cmk resources beside a pinned one",
     pod(container(**cores(1, "2")), container("tool", privileged=True)), deployed),
    ("unprivileged pinned container", pod(container(**cores(1, "2"), privileged=False)), deployed),
    ("no ConfigMap at all: cpu unchecked", pod(container(**cores(1, "1"))),
     lambda: [o for o in deployed() if o["kind"] != "ConfigMap"]),
]

# (case, pod, objects, every denial the API server would give, sorted by name; the API server names one of them)
REFUSED = [
    ("one core, cpu 1: the common mistake", pod(container(**cores(1, "1"))), deployed,
     every_group("app", 1, 2)),
    ("one core, no cpu", pod(container(limits={EXCLUSIVE: 1})), deployed, every_group("app", 1, 2)),
    ("one core, burstable cpu", pod(container(limits={EXCLUSIVE: 1, "cpu": "3"}, requests={"cpu": "2"})), deployed,
     every_group("app", 1, 2)),
    ("one core, fractional cpu", pod(container(**cores(1, "1500m"))), deployed, every_group("app", 1, 2)),
    ("one core, cpu above its threads", pod(container(**cores(1, "4"))), deployed, every_group("app", 1, 2)),
    ("two cores, cpu of one", pod(container(**cores(2, "2")), group="default"), deployed,
     [cpu_fix("app", 2, 4, no_group=False)]),
    ("requests without limits", pod(container(limits={EXCLUSIVE: 1}, requests={EXCLUSIVE: 1, "cpu": "2"}),
                                    group="large"), deployed,
     [cpu_fix("app", 1, 2, group="large", no_group=False)]),
    ("non-isolcpus core, cpu 1", pod(container(limits={NON_ISOLCPUS: 1, "cpu": "1"}), group="large"), deployed,
     [cpu_fix("app", 1, 2, group="large", no_group=False)]),
    ("both core pools, cpu of one", pod(container(limits={EXCLUSIVE: 1, NON_ISOLCPUS: 1, "cpu": "2"}),
                                        group="large"), deployed,
     [cpu_fix("app", 2, 4, group="large", no_group=False)]),
    ("init container, cpu 1", pod(container(), init=[container("setup", **cores(1, "1"))], group="default"), deployed,
     [cpu_fix("setup", 1, 2, no_group=False)]),
    ("second container wrong", pod(container(**cores(1, "2")), container("worker", **cores(2, "2")),
                                   group="default"), deployed, [cpu_fix("worker", 2, 4, no_group=False)]),
    ("no SMT group, cpu 2", pod(container(**cores(1, "2")), group="nosmt"), with_nosmt,
     [cpu_fix("app", 1, 1, threads=1, group="nosmt", no_group=False)]),
    ("no group, and the groups disagree", pod(container(**cores(1, "2"))), with_nosmt,
     [cpu_fix("app", 1, 1, threads=1, group="nosmt")]),
    ("cores and a slot, requests below the cores",
     pod(container(limits={EXCLUSIVE: 1, INFRA: 1, "cpu": "4"}, requests={"cpu": "1"}), group="default"), deployed,
     [cpu_fix("app", 1, 2, slot=True, no_group=False)]),
    ("a malformed group ConfigMap", pod(container(**cores(1, "2")), group="default"),
     lambda: [*deployed(), group_config("broken", "two")],
     [CPU_POLICY + "ConfigMap cmk-system/cmk-node-group-broken (node group of cmk-exclusive-cpu): set"
      " data.node-group to the group name and data.threads-per-core to the hardware threads per core of its nodes,"
      ' e.g. "2"']),
    ("init container sets an env variable", pod(container(), init=[container("setup", env=["CMK_CPUS_SHARED"])]),
     deployed, [POD_POLICY + "container setup sets CMK_CPUS_SHARED" + ENV_FIX]),
    ("envFrom with a reserved prefix", pod(container(env_from=["CMK_CPUS_"])), deployed,
     [POD_POLICY + "container app imports variables named CMK_CPUS_*" + ENV_FIX]),
    ("envFrom with a longer reserved prefix", pod(container(env_from=["CMK_CDI_X"])), deployed,
     [POD_POLICY + "container app imports variables named CMK_CDI_X*" + ENV_FIX]),
    ("privileged with exclusive cores", pod(container(**cores(1, "2"), privileged=True)), deployed,
     [POD_POLICY + "container app" + PRIVILEGED_FIX]),
    ("privileged with a shared slot", pod(container(limits={SHARED: 1}, privileged=True)), deployed,
     [POD_POLICY + "container app" + PRIVILEGED_FIX]),
    ("privileged init container with an infra slot",
     pod(container(), init=[container("setup", limits={INFRA: 1}, privileged=True)]), deployed,
     [POD_POLICY + "container setup" + PRIVILEGED_FIX]),
    *[(f"envFrom prefix {prefix!r}, the start of a reserved name", pod(container(env_from=[prefix])), deployed,
       [POD_POLICY + f"container app imports variables named {prefix}*" + SHORT_PREFIX_FIX.format(prefix=prefix)])
      for prefix in ("CMK_", "CMK_C", "C", "CMK_CPUS", "CMK_CD")],
    ("envFrom with an empty prefix, holding a pool", pod(container(**cores(1, "2"), env_from=[""])), deployed,
     [POD_POLICY + "container app" + NO_PREFIX_FIX]),
    ("envFrom without a prefix, in a pool init container",
     pod(container(), init=[container("setup", limits={INFRA: 1}, env_from=["APP_", None])]), deployed,
     [POD_POLICY + "container setup" + NO_PREFIX_FIX]),
    *[(f"capability {cap} added", pod(container(**cores(1, "2"), security={"capabilities": {"add": ["CHOWN", cap]}})),
       deployed, [POD_POLICY + f"container app{POOL}adds capability {cap}" + CAP_FIX])
      for cap in ("SYS_ADMIN", "CAP_SYS_ADMIN", "ALL", "sys_admin")],
    ("seccomp Unconfined on the pod", pod(container(limits={SHARED: 1}), security={"seccompProfile": {"type": "Unconfined"}}),
     deployed, [POD_POLICY + "container app" + UNCONFINED_FIX]),
    ("seccomp Unconfined on the container over the pod's RuntimeDefault",
     pod(container(limits={INFRA: 1}, security={"seccompProfile": {"type": "Unconfined"}})), deployed,
     [POD_POLICY + "container app" + UNCONFINED_FIX]),
    ("no seccomp profile at all", pod(container(**cores(1, "2")), security={}), deployed,
     [POD_POLICY + "container app" + NO_SECCOMP_FIX]),
    ("no seccomp profile, running as non-root", pod(container(**cores(1, "2")), security={"runAsNonRoot": True,
                                                                                           "runAsUser": 1000}),
     deployed, [POD_POLICY + "container app" + NO_SECCOMP_FIX]),
    ("AppArmor Unconfined on the container", pod(container(**cores(1, "2"),
                                                           security={"appArmorProfile": {"type": "Unconfined"}})),
     deployed, [POD_POLICY + "container app" + APPARMOR_FIX]),
    ("AppArmor Unconfined on the pod", pod(container(**cores(1, "2")), security={
        **RUNTIME_DEFAULT, "appArmorProfile": {"type": "Unconfined"}}), deployed,
     [POD_POLICY + "container app" + APPARMOR_FIX]),
    ("AppArmor unconfined by the legacy annotation", annotated(pod(container(**cores(1, "2"))), {
        "container.apparmor.security.beta.kubernetes.io/app": "unconfined"}), deployed,
     [POD_POLICY + "container app" + APPARMOR_FIX]),
    ("a runtimeClassName, holding a pool", pod(container(**cores(1, "2")), runtimeClassName="kata"), deployed,
     [POD_POLICY + "pod requests a cmk.intel.com/* resource and names runtimeClassName kata" + RUNTIME_CLASS_FIX]),
    ("everything wrong at once", pod(container(**cores(1, "1"), env=["CMK_CPUS_EXCLUSIVE"], privileged=True),
                                     group="default"), deployed,
     [cpu_fix("app", 1, 2, no_group=False), POD_POLICY + "container app sets CMK_CPUS_EXCLUSIVE" + ENV_FIX,
      POD_POLICY + "container app" + PRIVILEGED_FIX]),
]


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
    assert kinds == [("ValidatingAdmissionPolicy", "cmk-exclusive-cpu"), ("ValidatingAdmissionPolicy", "cmk-pool-containers"),
                     ("ValidatingAdmissionPolicyBinding", "cmk-exclusive-cpu"),
                     ("ValidatingAdmissionPolicyBinding", "cmk-pool-containers")]
    assert all("namespace" not in o["metadata"] for o in render("admission"))


def test_every_expression_compiles_and_none_reads_the_harness_quantity_field() -> None:
    texts = []
    for policy in (o for o in render("admission") if o["kind"] == "ValidatingAdmissionPolicy"):
        spec = policy["spec"]
        texts += [v["expression"] for v in spec.get("variables", [])]
        texts += [v[key] for v in spec["validations"] for key in ("expression", "messageExpression") if key in v]
        texts += [v["expression"] for v in spec.get("matchConditions", [])]
    assert len(texts) == 32
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
