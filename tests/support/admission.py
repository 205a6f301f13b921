"""A ValidatingAdmissionPolicy evaluator for tests: the API server's steps, with a real CEL engine.

The expressions run on Google's CEL implementation (``cel-expr-python``, the cel-cpp runtime).
What Kubernetes adds on top of CEL is ported here from its source, never loosened (the doc below lists what).

Why it works this way: ``docs/design/tests-admission.md``.
"""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from cel_expr_python import cel
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

INT64_MAX = 2**63 - 1
NANO = -9
MAX_INT64_FACTORS = 18  # maxInt64Factors: digits an int64 holds safely
DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
MAX_MESSAGE_BYTES = 5 * 1024  # celconfig.MaxEvaluatedMessageExpressionSizeBytes


class NotPorted(Exception):
    """A case the port does not cover: the test must not rely on it."""


class EvaluationError(Exception):
    """An expression failed to compile or evaluate."""


class RejectedByApi(ValueError):
    """The API server refuses this pod before admission policies see it."""


# --- resource.Quantity ------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantity:
    """A parsed quantity held as the int64 fast path does: ``value`` × 10^``scale``."""

    value: int
    scale: int
    format: str  # DecimalSI, BinarySI or DecimalExponent
    text: str  # the cached string ParseQuantity keeps when the input was already canonical, else ""

    @property
    def exact(self) -> Fraction:
        return Fraction(self.value) * Fraction(10) ** self.scale

    def as_int64(self) -> int | None:
        """``Quantity.AsInt64``: only scale 0 or above converts (negative scales are never reduced)."""
        if self.scale == 0:
            return self.value
        if self.scale < 0:
            return None
        result = self.value * 10**self.scale
        return result if -INT64_MAX - 1 <= result <= INT64_MAX else None

    def string(self) -> str:
        """``Quantity.String``: the cached text, else ``CanonicalizeBytes``."""
        if self.text:
            return self.text
        if self.value == 0:
            return "0"
        fmt = self.format
        if fmt == "BinarySI":
            if -1024 < self.exact < 1024 or self.exact.denominator != 1:
                fmt = "DecimalSI"
            else:
                amount, exponent = _remove_factors(int(self.exact), 1024)
                suffix = {v // 10: k for k, v in BINARY_SUFFIXES.items()} | {0: ""}
                if exponent not in suffix:
                    raise NotPorted(f"binary exponent {exponent}")
                return f"{amount}{suffix[exponent]}"
        amount, exponent = _remove_factors(self.value, 10)
        exponent += self.scale
        while exponent % 3:
            amount, exponent = amount * 10, exponent - 1
        if fmt == "DecimalExponent":
            return f"{amount}" if exponent == 0 else f"{amount}e{exponent}"
        names = {v: k for k, v in DECIMAL_SUFFIXES.items()}
        if exponent not in names:
            raise NotPorted(f"decimal exponent {exponent}")
        return f"{amount}{names[exponent]}"


def _remove_factors(value: int, base: int) -> tuple[int, int]:
    times = 0
    while value and value % base == 0:
        value, times = value // base, times + 1
    return value, times


def _split(text: str) -> tuple[bool, str, str, str]:
    """``parseQuantityString``: sign, numerator, denominator and suffix; ValueError when malformed."""
    pos, end, positive = 0, len(text), True
    if text[:1] in "+-":
        positive, pos = text[0] != "-", 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and text[pos].isdigit():
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isdigit():
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in "eEinumkKMGTP":
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isdigit():
        pos += 1
    if pos < end:
        raise ValueError("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    return positive, num, denom, text[suffix_start:end]


def _suffix(suffix: str) -> tuple[int, int, str]:
    if suffix in DECIMAL_SUFFIXES:
        return 10, DECIMAL_SUFFIXES[suffix], "DecimalSI"
    if suffix in BINARY_SUFFIXES:
        return 2, BINARY_SUFFIXES[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        return 10, int(suffix[1:]), "DecimalExponent"
    raise ValueError("unable to parse quantity's suffix")


def parse_quantity(text: str) -> Quantity:
    """``resource.ParseQuantity`` on its int64 fast path; NotPorted where Go falls back to inf.Dec."""
    if not text:
        raise ValueError("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    if text == "0":
        return Quantity(0, 0, "DecimalSI", text)
    positive, num, denom, suffix = _split(text)
    _, exponent, fmt = _suffix(suffix)
    mantissa = 1
    if fmt == "BinarySI":
        scale = 0
        if exponent >= 0 and not denom:
            mantissa = 1 << exponent
            precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        else:
            precision = -1
    else:
        scale = exponent
        precision = MAX_INT64_FACTORS - (len(num) + len(denom))
    scale -= len(denom)
    if precision < 0 or scale < NANO:
        raise NotPorted(f"quantity {text!r} takes ParseQuantity's inf.Dec path")
    shifted = num + denom
    value = int(shifted) * mantissa
    if value > INT64_MAX:
        raise NotPorted(f"quantity {text!r} overflows the int64 path")
    value = value if positive else -value
    if fmt == "BinarySI":
        canonical = exponent % 10 == 0 and int(shifted) & 0x07 != 0
    else:
        canonical = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
    return Quantity(value, scale, fmt, text if canonical else "")


# --- the CEL environment ----------------------------------------------------------------------


def _quantity_message() -> type:
    """``kubernetes.Quantity`` as a protobuf message, since the engine takes no opaque Python values.

    Its one field carries the port's state; policy expressions never read it (the tests check).
    """
    file = descriptor_pb2.FileDescriptorProto(name="cmk_tests/kubernetes_quantity.proto", package="kubernetes",
                                              syntax="proto3")
    message = file.message_type.add(name="Quantity")
    message.field.add(name="cmk_tests_state", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    POOL.Add(file)
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName("kubernetes.Quantity"))


POOL = descriptor_pool.DescriptorPool()
QuantityMessage = _quantity_message()
QUANTITY_FIELD = "cmk_tests_state"


def _wrap(q: Quantity) -> Any:
    return QuantityMessage(cmk_tests_state=f"{q.value} {q.scale} {q.format} {q.text}")


def _unwrap(message: Any) -> Quantity:
    value, scale, fmt, text = (message.cmk_tests_state.split(" ") + [""])[:4]
    return Quantity(int(value), int(scale), fmt, text)


def _as_integer(message: Any) -> int:
    result = _unwrap(message).as_int64()
    if result is None:
        raise ValueError("cannot convert value to integer")
    return result


def _compare(a: Any, b: Any) -> int:
    x, y = _unwrap(a).exact, _unwrap(b).exact
    return (x > y) - (x < y)


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def _sum(values: Sequence[Any], zero: Any) -> Any:
    total = zero
    for value in values:
        total = total + value
    return total


def _functions() -> list[cel.FunctionDecl]:
    q = cel.Type("kubernetes.Quantity")
    string, boolean, integer, double = cel.Type.STRING, cel.Type.BOOL, cel.Type.INT, cel.Type.DOUBLE

    def member(name: str, overload: str, result: cel.Type, params: list[cel.Type],
               impl: Callable[..., Any]) -> cel.FunctionDecl:
        return cel.FunctionDecl(name, [cel.Overload(overload, result, params, is_member=True, impl=impl)])

    return [
        cel.FunctionDecl("quantity", [cel.Overload("string_to_quantity", q, [string],
                                                   impl=lambda s: _wrap(parse_quantity(s)))]),
        cel.FunctionDecl("isQuantity", [cel.Overload("is_quantity_string", boolean, [string], impl=_is_quantity)]),
        # 1.30 declares sign as a global function, not a member
        cel.FunctionDecl("sign", [cel.Overload("quantity_sign", integer, [q],
                                               impl=lambda a: (_unwrap(a).value > 0) - (_unwrap(a).value < 0))]),
        member("isGreaterThan", "quantity_is_greater_than", boolean, [q, q], lambda a, b: _compare(a, b) == 1),
        member("isLessThan", "quantity_is_less_than", boolean, [q, q], lambda a, b: _compare(a, b) == -1),
        member("compareTo", "quantity_compare_to", integer, [q, q], _compare),
        member("asApproximateFloat", "quantity_get_float", double, [q], lambda a: float(_unwrap(a).exact)),
        member("asInteger", "quantity_get_int", integer, [q], _as_integer),
        member("isInteger", "quantity_is_integer", boolean, [q], lambda a: _unwrap(a).as_int64() is not None),
        # lists.go's sum() for list(int) only: cel-cpp dispatches on the argument's kind (list), so a
        # second overload over list(double) would collide; the policy sums ints
        member("sum", "list_int_sum_int", integer, [cel.Type.List(integer)], lambda xs: _sum(xs, 0)),
    ]


ENV = cel.NewEnv(POOL, variables={name: cel.Type.DYN for name in
                                  ("object", "oldObject", "params", "request", "namespaceObject", "variables")},
                 functions=_functions())


def check_literals(expression: str) -> None:
    """HomogeneousAggregateLiterals, on the text: list literals of several elements hold string literals only."""
    if re.search(r"\{", _strip_strings(expression)):
        raise EvaluationError(f"map literal in {expression!r}: the harness does not check their element types")
    text = _strip_strings(expression, keep=True)
    for match in re.finditer(r"(?<![\w\)\]])\s*\[", text):
        depth, items, current, i = 0, [], "", match.end()
        while i < len(text):
            ch = text[i]
            if ch in "[(" :
                depth += 1
            elif ch in ")]":
                if depth == 0:
                    items.append(current.strip())
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(current.strip())
                current = ""
                i += 1
                continue
            current += ch
            i += 1
        items = [item for item in items if item]
        if len(items) > 1 and not all(re.fullmatch(r"'[^']*'", item) for item in items):
            raise EvaluationError(f"mixed list literal [{', '.join(items)}] in {expression!r}")


def _strip_strings(expression: str, *, keep: bool = False) -> str:
    """The expression with each single-quoted string's contents blanked (kept as '' when ``keep``)."""
    return re.sub(r"'(?:\\.|[^'\\])*'", "'x'" if keep else "''", expression)


@dataclass
class Compiled:
    text: str
    program: Any

    def __call__(self, data: Mapping[str, Any]) -> Any:
        result = self.program.eval(data=dict(data))
        if result.type() == cel.Type.ERROR:
            raise EvaluationError(f"{self.text!r}: {result.value()}")
        return result.plain_value()


def compile_expression(text: str) -> Compiled:
    check_literals(text)
    try:
        return Compiled(text, ENV.compile(text))
    except RuntimeError as err:
        raise EvaluationError(f"{text!r} does not compile: {err}") from None


# --- the object the API server hands to admission ---------------------------------------------

CONTAINER_LISTS = ("initContainers", "containers")


def api_pod(pod: Mapping[str, Any], *, operation: str = "CREATE") -> dict[str, Any]:
    """The pod as admission sees it: defaulted, validated (the parts that matter here), canonical quantities."""
    pod = copy.deepcopy(dict(pod))
    spec = pod["spec"]
    if operation == "CREATE" and spec.get("ephemeralContainers"):
        raise RejectedByApi("ephemeral containers cannot be set on create")
    for container in spec.get("ephemeralContainers", []):
        if container.get("resources"):
            raise RejectedByApi("ephemeral containers may not have resources")
    for kind in CONTAINER_LISTS:
        for container in spec.get(kind, []):
            resources = container.get("resources")
            if not resources:
                continue
            for field in ("limits", "requests"):
                if field in resources:
                    resources[field] = {name: parse_quantity(str(value)).string()
                                        for name, value in resources[field].items()}
            limits, requests = resources.get("limits", {}), resources.setdefault("requests", {})
            for name, value in limits.items():  # SetDefaults_Pod
                requests.setdefault(name, value)
            _validate_resources(container["name"], requests, limits)
    return pod


def _validate_resources(name: str, requests: Mapping[str, str], limits: Mapping[str, str]) -> None:
    for resource, value in requests.items():
        request = parse_quantity(value).exact
        if resource in limits and request > parse_quantity(limits[resource]).exact:
            raise RejectedByApi(f"{name}: {resource} request must be less than or equal to the limit")
        if "/" in resource and not resource.startswith(("kubernetes.io/", "hugepages-")):  # extended
            if request.denominator != 1:
                raise RejectedByApi(f"{name}: {resource} must be an integer")
            if resource not in limits:
                raise RejectedByApi(f"{name}: {resource} limit must be set for non overcommitable resources")
            if request != parse_quantity(limits[resource]).exact:
                raise RejectedByApi(f"{name}: {resource} must be equal to the limit")


# --- the dispatcher ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """An admission request for a pod: CREATE, or UPDATE of the pod or a subresource such as ephemeralcontainers.

    ``old`` is the pod before an UPDATE (``oldObject``); without it the update changed nothing in the spec.
    """

    pod: Mapping[str, Any]
    operation: str = "CREATE"
    subresource: str = ""
    namespace: str = "default"
    old: Mapping[str, Any] | None = None

    @property
    def resource(self) -> str:
        return "pods" + (f"/{self.subresource}" if self.subresource else "")


def _rule_matches(rule: Mapping[str, Any], request: Request) -> bool:
    def has(field: str, value: str) -> bool:
        return "*" in rule[field] or value in rule[field]

    return (has("apiGroups", "") and has("apiVersions", "v1") and has("operations", request.operation)
            and has("resources", request.resource) and rule.get("scope", "*") in ("*", "Namespaced"))


def _only(spec: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    extra = set(spec) - set(allowed)
    if extra:
        raise NotPorted(f"{where}: {sorted(extra)}")


def _params(binding: Mapping[str, Any], objects: Sequence[Mapping[str, Any]], policy: Mapping[str, Any],
            request: Request) -> list[Mapping[str, Any]] | None:
    """``CollectParams``: the parameter objects, [None] without paramKind, None for 'no params, Deny'."""
    kind, ref = policy["spec"].get("paramKind"), binding["spec"].get("paramRef")
    if kind is None or ref is None:
        return [None]  # type: ignore[list-item]
    _only(ref, ("name", "namespace", "selector", "parameterNotFoundAction"), "paramRef")
    namespace = ref.get("namespace") or request.namespace
    candidates = [obj for obj in objects if obj["apiVersion"] == kind["apiVersion"] and obj["kind"] == kind["kind"]
                  and obj["metadata"].get("namespace") == namespace]
    if "name" in ref:
        found = [obj for obj in candidates if obj["metadata"]["name"] == ref["name"]]
    else:
        _only(ref["selector"], ("matchLabels",), "paramRef.selector")
        wanted = ref["selector"].get("matchLabels", {}).items()
        found = [obj for obj in candidates if wanted <= obj["metadata"].get("labels", {}).items()]
    if not found and ref.get("parameterNotFoundAction") == "Deny":
        return None
    return sorted(found, key=lambda obj: obj["metadata"]["name"])


def _evaluate(policy: Mapping[str, Any], data: dict[str, Any]) -> list[str]:
    """``validator.Validate`` for one parameter: the messages of the validations that fail."""
    spec = policy["spec"]
    for condition in spec.get("matchConditions", []):
        if compile_expression(condition["expression"])(data) is not True:
            return []
    variables: dict[str, Any] = {}
    data["variables"] = variables
    for variable in spec.get("variables", []):
        variables[variable["name"]] = compile_expression(variable["expression"])(data)
    messages = []
    for validation in spec["validations"]:
        result = compile_expression(validation["expression"])(data)
        if result is True:
            continue
        if result is not False:
            raise EvaluationError(f"{validation['expression']!r} gave {result!r}, not a bool")
        message = ""
        if "messageExpression" in validation:
            value = compile_expression(validation["messageExpression"])(data)
            if isinstance(value, str):
                message = value.strip()
                if len(message) > MAX_MESSAGE_BYTES or "\n" in message:
                    message = ""
        if not message:
            message = validation.get("message", "").strip() or f"failed expression: {validation['expression'].strip()}"
        messages.append(message)
    return messages


def validate(policy: Mapping[str, Any], data: dict[str, Any]) -> list[str]:
    """One policy's failed validations' messages for request ``data`` made by hand (``object``, ``oldObject``,
    ``request``): for the policies on other kinds than pods, such as the untaint policy's nodes."""
    return _evaluate(policy, dict(data))


def denials(objects: Sequence[Mapping[str, Any]], request: Request) -> list[str]:
    """Every denial the cluster's policies give the request, as the API server words them.

    The API server reports one of them. Where several params of one binding deny (node groups'
    ConfigMaps), which one it reports varies between requests (kube-apiserver v1.36.3, the
    cluster tier): these are sorted by name, not in the server's order.
    """
    policies = sorted((o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"), key=lambda o: o["metadata"]["name"])
    bindings = sorted((o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"),
                      key=lambda o: o["metadata"]["name"])
    pod = api_pod(request.pod, operation=request.operation)
    old = api_pod(request.old or request.pod, operation="UPDATE") if request.operation == "UPDATE" else None
    base = {"object": pod, "oldObject": old, "namespaceObject": {"metadata": {"name": request.namespace}},
            "request": {"operation": request.operation, "namespace": request.namespace,
                        "name": pod["metadata"].get("name", ""), "subResource": request.subresource}}
    found = []
    for policy in policies:
        spec, name = policy["spec"], policy["metadata"]["name"]
        _only(spec["matchConstraints"], ("resourceRules",), "matchConstraints")
        if not any(_rule_matches(rule, request) for rule in spec["matchConstraints"]["resourceRules"]):
            continue
        for binding in (b for b in bindings if b["spec"]["policyName"] == name):
            _only(binding["spec"], ("policyName", "validationActions", "paramRef"), "binding")
            params = _params(binding, objects, policy, request)
            prefix = f"ValidatingAdmissionPolicy '{name}' with binding '{binding['metadata']['name']}' denied request: "
            if params is None:
                if spec.get("failurePolicy", "Fail") == "Fail":
                    found.append(prefix + "failed to configure binding: "
                                 "no params found for policy binding with `Deny` parameterNotFoundAction")
                continue
            for param in params:
                for message in _evaluate(policy, dict(base, params=param)):
                    if "Deny" in binding["spec"]["validationActions"]:
                        found.append(prefix + message)
    return found


def kubectl_error(request: Request, denial: str) -> str:
    """What ``kubectl apply`` prints for a denial (reason Invalid, one cause with an empty field)."""
    return f'The {request.resource.split("/")[0]} "{request.pod["metadata"]["name"]}" is invalid: : {denial}'


ROOT = Path(__file__).resolve().parents[2]


DEPLOY = ROOT / "deploy"


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
               f" least {want} and its cpu limit, if it has one, above {want}")
        why = ": it keeps its CFS quota, which must cover every thread of its cores and its time on the CPUs of the slot"
    else:
        fix = f"container {name} holds {held} whole core(s): set its cpu requests and limits both to {want}"
        why = ", so its CFS quota covers every thread of its cores"
    return (CPU_POLICY + fix + f" ({held} x {threads} threads per core on node group {group})" + why
            + (NO_GROUP if no_group else ""))


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
    ("cores and a shared slot, requests of the cores, limit above them",
     pod(container(limits={EXCLUSIVE: 1, SHARED: 1, "cpu": "3"}, requests={"cpu": "2"})), deployed),
    ("cores and a shared slot, requests of the cores, no limit: no quota",
     pod(container(limits={EXCLUSIVE: 1, SHARED: 1}, requests={"cpu": "2"})), deployed),
    ("cores and an infra slot, Guaranteed just above the cores",
     pod(container(limits={EXCLUSIVE: 1, INFRA: 1, "cpu": "2100m"}), group="default"), deployed),
    ("no SMT group, a core and a shared slot", pod(container(limits={EXCLUSIVE: 1, SHARED: 1, "cpu": "2"},
                                                             requests={"cpu": "1"}), group="nosmt"), with_nosmt),
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
    ("cores and a shared slot, cpu limit of just the cores' threads",
     pod(container(limits={EXCLUSIVE: 1, SHARED: 1, "cpu": "2"}), group="default"), deployed,
     [cpu_fix("app", 1, 2, slot=True, no_group=False)]),
    ("cores and a shared slot, limit below the cores", pod(container(limits={EXCLUSIVE: 2, SHARED: 1, "cpu": "3"},
                                                                     requests={"cpu": "3"})), deployed,
     [cpu_fix("app", 2, 4, slot=True), cpu_fix("app", 2, 4, group="large", slot=True)]),
    ("no SMT group, a core and a shared slot, limit of the core",
     pod(container(limits={NON_ISOLCPUS: 1, SHARED: 1, "cpu": "1"}), group="nosmt"), with_nosmt,
     [cpu_fix("app", 1, 1, threads=1, group="nosmt", slot=True, no_group=False)]),
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
