"""The program the systemd tier runs inside each VM, systemd being PID 1 on cgroup v2: one JSON result.

Run as ``python3 -m tests.systemd.guest PLAN.json`` with the root file system's own python3, from the
``systemd.run=`` unit; the standard library and small pure modules of this repository only (the venv is
not in the guest). What it builds and records: docs/dev/tests.md, "The systemd tier". Judging is the
host's job: nothing here asserts.
"""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tests.node import oci
from tests.support import escape
from tests.systemd import steps

CGROUP = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods.slice"
WAIT_SECONDS = 120.0  # TCG on a busy machine: bounds a hang, not a speed
#: systemd applies a unit's cgroup context from its event loop: give it a moment after each step.
SETTLE_SECONDS = 1.0
ATTACKER = "/escape"
#: containerd's default spec's capabilities (``runc spec`` gives three): a root process may attack.
DEFAULT_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
                "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL",
                "CAP_AUDIT_WRITE"]
#: The workload's CFS quota, as the kubelet has containerd write it (half a CPU).
CPU_RESOURCES = {"quota": 50000, "period": 100000, "shares": 512}
#: `update --memory` as each runtime takes 200M: crun 1.8 parses the value as a JSON number, bytes only.
MEMORY_LIMIT = {"runc": "200M", "crun": str(200 * 1024 * 1024)}
JOURNAL_PATTERN = re.compile(r"cpuset|ENOSPC|No space left", re.IGNORECASE)
#: Every workload's script: its CPUs, then the node tier's escape at start (as root, by unshare and by one raw
#: clone: ``tests/support/escape.c``), each start alike (the restart's too), then it sleeps.
SCRIPT = (f"grep Cpus_allowed_list /proc/self/status; {ATTACKER} unshare; {ATTACKER} clone; echo ready; "
          "exec sleep 3600")


def progress(message: str) -> None:
    print(f"systemd-guest {time.monotonic():.0f}: {message}", flush=True)


def run(argv: list[str], timeout: float = WAIT_SECONDS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def checked(argv: list[str], timeout: float = WAIT_SECONDS) -> str:
    done = run(argv, timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def read(path: Path | str) -> str:
    """A file's stripped text, or ``<ERRNO>`` saying why it could not be read (what the host then shows)."""
    try:
        return Path(path).read_text().strip()
    except OSError as err:
        return f"<{os.strerror(err.errno or 0)}>"


def allowed_of(status: str) -> str:
    """The ``Cpus_allowed_list`` of a /proc/PID/status text (``<none>`` if absent)."""
    found = re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.MULTILINE)
    return found.group(1) if found else "<none>"


def facts() -> dict[str, Any]:
    """What the host's boot test asserts: systemd as PID 1 on cgroup2, the kernel's release."""
    mounts = {fields[1]: fields for fields in (line.split() for line in read("/proc/self/mounts").splitlines())}
    cgroup_mount = mounts.get(str(CGROUP), ["", "", "", ""])
    return {
        "release": os.uname().release,
        "cmdline": read("/proc/cmdline"),
        "pid1_comm": read("/proc/1/comm"),
        "pid1_exe": os.readlink("/proc/1/exe"),
        "cgroup_fs": cgroup_mount[2],
        "cgroup_options": cgroup_mount[3],
        "cgroup_controllers": read(CGROUP / "cgroup.controllers"),
        "online": read("/sys/devices/system/cpu/online"),
        "systemd": run(["systemctl", "--version"]).stdout.splitlines()[:1],
        "runc": run(["runc", "--version"]).stdout.splitlines()[:1],
        "crun": run(["crun", "--version"]).stdout.splitlines()[:1],
        "uptime_at_start": float(read("/proc/uptime").split()[0]),
    }


# -- the kubelet's slices -----------------------------------------------------------------


def start_slice(name: str, parent: str) -> None:
    """Start ``name`` as a transient slice the way the kubelet's cgroup manager does (runc's systemd manager:
    ``StartTransientUnit`` with Wants= the parent, no default dependencies, accounting on)."""
    properties = [("Description", "s", f"cmk systemd tier: {name}"), ("DefaultDependencies", "b", "false"),
                  ("MemoryAccounting", "b", "true"), ("CPUAccounting", "b", "true"), ("IOAccounting", "b", "true"),
                  ("TasksAccounting", "b", "true")]
    args = [str(len(properties) + (1 if parent else 0))]
    for key, kind, value in properties:
        args += [key, kind, value]
    if parent:
        args += ["Wants", "as", "1", parent]
    checked(["busctl", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
             "org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))", name, "replace", *args, "0"])
    deadline = time.monotonic() + WAIT_SECONDS
    while run(["systemctl", "is-active", name]).stdout.strip() != "active":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not become active: {run(['systemctl', 'status', name]).stdout}")
        time.sleep(0.2)


def slice_path(pod_slice: str) -> Path:
    return CGROUP / KUBEPODS / pod_slice


# -- containers -----------------------------------------------------------------------------


@cache
def default_config(runtime: str) -> dict[str, Any]:
    """``RUNTIME spec``'s config.json, once per runtime."""
    directory = Path(tempfile.mkdtemp(prefix=f"{runtime}-spec-"))
    subprocess.run([runtime, "spec"], cwd=directory, check=True, capture_output=True)
    return json.loads((directory / "config.json").read_text())


def make_rootfs(path: Path) -> None:
    """Debian's static busybox and the applets the scripts use (as tests/node/guest.py ``_rootfs``)."""
    (path / "bin").mkdir(parents=True)
    for d in ("proc", "sys", "dev", "tmp"):
        (path / d).mkdir(parents=True, exist_ok=True)
    (path / ATTACKER.lstrip("/")).touch()
    shutil.copy2("/bin/busybox", path / "bin/busybox")
    for applet in ("sh", "grep", "cat", "taskset", "sleep", "echo"):
        (path / "bin" / applet).symlink_to("busybox")


@dataclass
class Container:
    """One container of a pod: its id, bundle and config.json, and the pod it is in."""

    runtime: str
    container_id: str
    pod_slice: str
    bundle: Path
    config: dict[str, Any]
    stdout: Path
    #: How long the last ``run -d`` took (the hooks run within it), seconds.
    run_seconds: float = 0.0

    @property
    def scope(self) -> Path:
        return slice_path(self.pod_slice) / steps.scope(self.container_id)

    def runtime_argv(self, *args: str) -> list[str]:
        return [self.runtime, "--systemd-cgroup", *args]

    def start(self) -> list[str]:
        """``RUNTIME --systemd-cgroup run -d``; the script's lines once it printed ``ready``."""
        (self.bundle / "config.json").write_text(json.dumps(self.config, indent=1))
        pid_file = self.bundle / "pid"
        pid_file.unlink(missing_ok=True)
        stderr = self.bundle / "stderr"
        # Detached, the container keeps runc's stdio (pass-through): files, never pipes this program waits on.
        with self.stdout.open("w") as out, stderr.open("w") as err:
            began = time.monotonic()
            done = subprocess.run(self.runtime_argv("run", "-d", "--pid-file", str(pid_file), "--bundle",
                                                    str(self.bundle), self.container_id),
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=WAIT_SECONDS, check=False)
            self.run_seconds = round(time.monotonic() - began, 1)
        if done.returncode != 0:
            raise RuntimeError(f"{self.runtime} run {self.container_id[:12]}: exit {done.returncode}: "
                               f"{read(stderr)} {read(self.stdout)}")
        deadline = time.monotonic() + WAIT_SECONDS
        while "ready" not in self.stdout.read_text():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.runtime} run {self.container_id[:12]}: no 'ready' in "
                                   f"{WAIT_SECONDS:.0f} s: {self.stdout.read_text()!r}")
            time.sleep(0.1)
        return self.stdout.read_text().splitlines()

    def delete(self) -> None:
        run(self.runtime_argv("delete", "--force", self.container_id))

    def pid(self) -> int:
        return int(read(self.bundle / "pid"))

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return run(self.runtime_argv("exec", self.container_id, *argv))


@dataclass
class Pod:
    kind: str
    pod_slice: str
    sandbox: Container
    workload: Container
    #: What the workload's script printed at its last start.
    lines: list[str]


def container_config(runtime: str, bundle: Path, pod_slice: str, container_id: str, script: str,
                     annotations: dict[str, str], install_dir: str) -> dict[str, Any]:
    """The runtime's default config.json as containerd would hand it over for one container of a pod: a busybox
    root running ``script`` in the scope ``<pod slice>:cri-containerd:<id>``, uid 0 with containerd's default
    capabilities and no seccomp profile (a root process may try the escape), the attacker at :data:`ATTACKER`."""
    make_rootfs(bundle / "rootfs")
    config = copy.deepcopy(default_config(runtime))
    config["process"].update(args=["sh", "-c", script], terminal=False, env=["PATH=/bin"])
    config["process"]["capabilities"] = {kind: list(DEFAULT_CAPS) for kind in ("bounding", "effective", "permitted")}
    config["root"] = {"path": "rootfs", "readonly": True}
    config["hostname"] = container_id[:12]
    config["annotations"] = annotations
    config["linux"]["cgroupsPath"] = f"{pod_slice}:cri-containerd:{container_id}"
    config["linux"].pop("seccomp", None)
    config["mounts"].append({"destination": ATTACKER, "type": "bind", "source": f"{install_dir}/escape",
                             "options": ["bind", "ro"]})
    return config


def make_pod(runtime: str, kind: str, plan: dict[str, Any], work: Path) -> Pod:
    """A pod as the kubelet and containerd make it: its slice, its sandbox, then its workload container."""
    uid = str(uuid.uuid4())
    pod_slice = steps.pod_slice(uid)
    start_slice(pod_slice, KUBEPODS)
    sandbox_id, workload_id = secrets.token_hex(32), secrets.token_hex(32)
    base = {"io.kubernetes.cri.sandbox-name": f"{kind}-{runtime}", "io.kubernetes.cri.sandbox-namespace": "default",
            "io.kubernetes.cri.sandbox-uid": uid}
    sandbox_bundle = work / f"{kind}-sandbox"
    sandbox_config = container_config(runtime, sandbox_bundle, pod_slice, sandbox_id, "echo ready; exec sleep 3600",
                                      {**base, "io.kubernetes.cri.container-type": "sandbox",
                                       "io.kubernetes.cri.sandbox-id": sandbox_id}, plan["install_dir"])
    sandbox = Container(runtime, sandbox_id, pod_slice, sandbox_bundle, sandbox_config, sandbox_bundle / "stdout")
    workload_bundle = work / f"{kind}-workload"
    config = container_config(runtime, workload_bundle, pod_slice, workload_id, SCRIPT,
                              {**base, "io.kubernetes.cri.container-type": "container",
                               "io.kubernetes.cri.container-name": kind,
                               "io.kubernetes.cri.sandbox-id": sandbox_id}, plan["install_dir"])
    config["linux"].setdefault("resources", {})["cpu"] = dict(CPU_RESOURCES)
    if kind == "pinned":
        # The daemon's CDI edits, applied as the CDI library does, with the Allocate answer's device.
        config = oci.apply_cdi(config, [plan["cdi_spec"]], plan["cdi_devices"])
    else:
        # The node-wide hook's hooks.d declaration `cmk install` wrote beside the binary.
        declarations = oci.read_hooks_dirs([Path(plan["install_dir"])])
        if not declarations:
            raise RuntimeError(f"no hooks.d declaration with an existing hook binary in {plan['install_dir']}")
        config = oci.apply_hooks(config, declarations, config["annotations"])
    for hook in config.get("hooks", {}).get("createRuntime", []):
        hook["timeout"] = max(hook.get("timeout", 0), steps.HOOK_TIMEOUT_UNDER_TCG)
    workload = Container(runtime, workload_id, pod_slice, workload_bundle, config, workload_bundle / "stdout")
    sandbox.start()
    return Pod(kind, pod_slice, sandbox, workload, workload.start())


# -- what a container reaches ---------------------------------------------------------------


def container_cgroup(init_cgroup: str) -> Path | None:
    """The cgroup the runtime made for the container, from its init's ``0::`` line: the scope for runc, crun's
    ``container`` subgroup below it; the hook's ``cmk-confined`` below either is not it."""
    found = re.search(r"^0::(/\S*)$", init_cgroup, re.MULTILINE)
    if not found:
        return None
    path = CGROUP / found.group(1).lstrip("/")
    return path.parent if path.name == "cmk-confined" else path


def units_shown(pods: list[Pod]) -> dict[str, str]:
    """What systemd holds for each pod's units (what it writes back on its next re-apply), by unit: one call."""
    units = [name for pod in pods for name in (pod.workload.scope.name, pod.pod_slice, pod.sandbox.scope.name)]
    shown = run(["systemctl", "show", "-p", "Id", "-p", "AllowedCPUs", "-p", "CPUQuotaPerSecUSec", *units]).stdout
    blocks = [" ".join(block.split()) for block in shown.strip().split("\n\n")]
    return {next((w.removeprefix("Id=") for w in block.split() if w.startswith("Id=")), ""): block
            for block in blocks}


def observe(pod: Pod, script: str, shown: dict[str, str]) -> dict[str, Any]:
    """What the pod's workload container reaches now, each file read as it is (``<error>`` if unreadable), what
    systemd holds for its units (``shown``), and the process ``RUNTIME exec`` starts in it running ``script``."""
    workload = pod.workload
    seen: dict[str, Any] = {"run_seconds": workload.run_seconds}
    own: Path | None = None
    try:
        pid = workload.pid()
        seen["init_pid"] = pid
        seen["affinity"] = allowed_of(read(f"/proc/{pid}/status"))
        seen["init_cgroup"] = read(f"/proc/{pid}/cgroup")
        own = container_cgroup(seen["init_cgroup"])
    except (OSError, ValueError) as err:
        seen["affinity"] = f"<no init: {err}>"
    scope, pod_dir = workload.scope, slice_path(pod.pod_slice)
    seen["scope_cpus"] = read(scope / "cpuset.cpus")
    seen["scope_effective"] = read(scope / "cpuset.cpus.effective")
    seen["slice_cpus"] = read(pod_dir / "cpuset.cpus")
    seen["slice_effective"] = read(pod_dir / "cpuset.cpus.effective")
    seen["sandbox_cpus"] = read(pod.sandbox.scope / "cpuset.cpus")
    seen["sandbox_effective"] = read(pod.sandbox.scope / "cpuset.cpus.effective")
    seen["kubepods_effective"] = read(CGROUP / KUBEPODS / "cpuset.cpus.effective")
    seen["scope_cpu_max"] = read(scope / "cpu.max")
    # The quota is where the runtime wrote it: the scope (runc), or crun's subgroup below it.
    seen["container_cgroup"] = str(own.relative_to(CGROUP)) if own else "<unknown>"
    seen["cpu_max"] = read(own / "cpu.max") if own else "<no container cgroup>"
    seen["container_effective"] = read(own / "cpuset.cpus.effective") if own else "<no container cgroup>"
    # The bound of a process exec'd later (runc and crun put it in the container's own cgroup): that cgroup's
    # parent, the pod slice under runc, the scope under crun (docs/design/hook.md, "The bound").
    seen["bound_effective"] = read(own.parent / "cpuset.cpus.effective") if own else "<no container cgroup>"
    seen["memory_max"] = read((own or scope) / "memory.max")
    seen["scope_subtree_control"] = read(scope / "cgroup.subtree_control")
    seen["slice_subtree_control"] = read(pod_dir / "cgroup.subtree_control")
    seen["systemd_properties"] = [shown.get(unit, f"<{unit} not shown>") for unit in
                                  (scope.name, pod.pod_slice, pod.sandbox.scope.name)]
    done = workload.exec("sh", "-c", script)
    output = (done.stdout + done.stderr).strip()
    seen["exec"] = allowed_of(output) if done.returncode == 0 else f"<exit {done.returncode}>"
    seen["exec_output"] = output[-400:]
    return seen


class Journal:
    """The journal's lines about cpusets since the last call (systemd's failed or taken cpuset writes)."""

    def __init__(self, work: Path) -> None:
        self.cursor = work / "journal.cursor"

    def lines(self) -> list[str]:
        done = run(["journalctl", "--no-pager", "-o", "short-monotonic", f"--cursor-file={self.cursor}"])
        return [line for line in done.stdout.splitlines() if JOURNAL_PATTERN.search(line)][-40:]


def attack(pod: Pod) -> dict[str, Any]:
    """The node tier's escape (``_escape_once``): what the attacker reached at the workload's last start (its
    script runs it by unshare and by one raw clone) and exec'd into it now, both ways."""
    found: dict[str, Any] = {}
    for mode in escape.MODES:
        line = next((ln for ln in pod.lines if ln.startswith(f"escape: {mode} ")), "")
        found[f"{mode}_at_start"] = _attempt(line)
        done = pod.workload.exec(ATTACKER, mode)
        found[f"{mode}_exec"] = _attempt(done.stdout + done.stderr)
    return found


def _attempt(output: str) -> dict[str, Any]:
    try:
        parsed = escape.parse(output)
    except AssertionError as err:
        return {"affinity": "<no result>", "steps": {}, "output": str(err)[-300:]}
    return {"affinity": parsed.affinity, "steps": parsed.steps}


# -- the steps ------------------------------------------------------------------------------


def wait_for_systemd() -> None:
    """After a re-exec: until PID 1 answers again."""
    deadline = time.monotonic() + WAIT_SECONDS
    while run(["systemctl", "show", "-p", "Version", "--value"]).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError("systemd did not answer after daemon-reexec")
        time.sleep(0.5)


def command(argv: list[str]) -> dict[str, Any]:
    began = time.monotonic()
    done = run(argv)
    return {"argv": argv, "exit": done.returncode, "output": (done.stdout + done.stderr)[-300:],
            "seconds": round(time.monotonic() - began, 1)}


def pod_step(step: str, pod: Pod) -> dict[str, Any]:
    """``step``'s own action on one pod (none for the steps systemd takes as a whole); what it said."""
    workload = pod.workload
    if step == "slice-set-property":
        return {"commands": [command(["systemctl", "set-property", "--runtime", pod.pod_slice, "CPUWeight=50"])]}
    if step == "scope-set-property":
        return {"commands": [command(["systemctl", "set-property", "--runtime", workload.scope.name, "CPUWeight=50"])]}
    if step == "update":
        return {"commands": [command(workload.runtime_argv("update", "--memory", MEMORY_LIMIT[workload.runtime],
                                                          workload.container_id))]}
    if step == "restart":
        workload.delete()
        pod.lines = workload.start()
    if step == steps.ESCAPE_STEP:
        return {"escape": attack(pod)}
    return {}


def exec_script(step: str, online: str) -> str:
    """What a process exec'd into the container runs: at the exec step it first asks for every CPU."""
    report = "grep Cpus_allowed_list /proc/self/status"
    return f"taskset -p -c {online} $$ >/dev/null 2>&1; echo taskset $?; {report}" if step == "exec" else report


def each_pod(pool: ThreadPoolExecutor, keys: list[tuple[str, str]],
             work: Callable[[tuple[str, str]], dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """``work`` on every pod at once (a runtime's binary costs seconds under TCG); a failure is that pod's record."""
    futures = {key: pool.submit(work, key) for key in keys}
    done: dict[tuple[str, str], dict[str, Any]] = {}
    for key, future in futures.items():
        try:
            done[key] = future.result()
        except Exception:  # noqa: BLE001 - what failed is the record; the host's tests show it
            done[key] = {"error": traceback.format_exc()[-3000:]}
    return done


def run_steps(plan: dict[str, Any], result: dict[str, Any], write: Callable[[], None]) -> None:
    """Every pod of every runtime through :data:`tests.systemd.steps.STEPS` together, observed after each step.

    systemd's rewrites (daemon-reload, daemon-reexec) are taken once for all
    pods; each pod's own action and observation run side by side. A pod's
    failure is recorded in its entry, never raised.
    """
    work = Path(tempfile.mkdtemp(prefix="pods-", dir="/tmp"))
    online = read("/sys/devices/system/cpu/online")
    keys = [(runtime, kind) for runtime in steps.RUNTIMES for kind in steps.KINDS]
    pods: dict[tuple[str, str], Pod] = {}
    journal = Journal(work)
    journal.lines()
    result["steps"], result["runtimes"] = {}, {runtime: {} for runtime in steps.RUNTIMES}
    try:
        with ThreadPoolExecutor(max_workers=len(keys)) as pool:
            for step in steps.STEPS:
                started = time.monotonic()
                overall: dict[str, Any] = {"commands": []}
                if step in ("daemon-reload", "daemon-reexec"):
                    overall["commands"].append(command(["systemctl", step]))
                    wait_for_systemd()

                def act(key: tuple[str, str], step: str = step) -> dict[str, Any]:
                    if step == "start":
                        pods[key] = make_pod(*key, plan, work / "-".join(key))
                        return {}
                    if key not in pods:
                        raise RuntimeError("the pod did not start (see its start step)")
                    return pod_step(step, pods[key])

                acted = each_pod(pool, keys, act)
                time.sleep(SETTLE_SECONDS)

                shown = units_shown(list(pods.values()))

                def look(key: tuple[str, str], step: str = step, shown: dict[str, str] = shown) -> dict[str, Any]:
                    if key not in pods:
                        return {}
                    return {**observe(pods[key], exec_script(step, online), shown), "lines": pods[key].lines}

                seen = each_pod(pool, keys, look)
                for key in keys:
                    runtime, kind = key
                    entry = result["runtimes"][runtime].setdefault(step, {"containers": {}})
                    entry["containers"][kind] = {**seen[key], **acted[key]}
                overall["journal"] = journal.lines()
                overall["seconds"] = round(time.monotonic() - started, 1)
                result["steps"][step] = overall
                failed = [f"{r}/{k}" for (r, k) in keys if "error" in acted[(r, k)] or "error" in seen[(r, k)]]
                progress(f"{step}: {overall['seconds']} s{'; errors in ' + ', '.join(failed) if failed else ''}")
                write()
        result["detection"] = widened_detected(pods, online)
        write()
    finally:
        clean_up()


def reported() -> dict[str, str]:
    """What the daemon's own check reports now (``cmk describe``, ``cmk_unconfined_containers``): container ID ->
    reason, from the real cgroup tree, with the exclusive CPU as the plan's."""
    # The product's own modules, standard library only as this program is.
    from deviceplugin.host.cgroups import scan
    from deviceplugin.model.confinement import unconfined
    return {found.container.id: found.reason for found in unconfined(scan(Path("/sys")).containers, steps.EXCLUSIVE)}


def widened_detected(pods: dict[tuple[str, str], Pod], online: str) -> dict[str, Any]:
    """Each workload's pod slice and scope widened through their owner (``set-property AllowedCPUs=`` every CPU:
    what a reset the hook's record could not prevent looks like), and what the detection reported before and after."""
    before = reported()
    for pod in pods.values():
        for unit in (pod.pod_slice, pod.workload.scope.name):
            run(["systemctl", "set-property", "--runtime", unit, f"AllowedCPUs={online}"])
    time.sleep(SETTLE_SECONDS)
    after = reported()
    return {f"{runtime}/{kind}": {"before": before.get(pod.workload.container_id, ""),
                                  "after": after.get(pod.workload.container_id, ""),
                                  "scope_effective": read(pod.workload.scope / "cpuset.cpus.effective")}
            for (runtime, kind), pod in pods.items()}


def clean_up() -> None:
    """Whatever is left in kubepods.slice killed (a container's init ignores SIGTERM), so the power-off is quick."""
    run(["systemctl", "kill", "--signal=SIGKILL", KUBEPODS])


def writer(path: Path, result: dict[str, Any]) -> Callable[[], None]:
    """``write()``: ``result`` as it stands, with the guest's seconds so far, renamed into place at ``path`` (the
    host never reads half a file, and a guest that dies keeps what it wrote last)."""
    started = time.monotonic()

    def write() -> None:
        result["guest_seconds"] = round(time.monotonic() - started, 1)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(result, indent=1))
        partial.rename(path)
    return write


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[1]).read_text())
    spec_timeouts = sorted({h.get("timeout") for d in plan["cdi_spec"]["devices"]
                            for h in d.get("containerEdits", {}).get("hooks", [])})
    result: dict[str, Any] = {"kernel": plan["kernel"],
                              "hook_timeout": {"cdi_spec": spec_timeouts, "used": steps.HOOK_TIMEOUT_UNDER_TCG}}
    write = writer(Path(plan["result"]), result)

    try:
        result["facts"] = facts()
        progress(f"kernel {result['facts']['release']}, PID 1 {result['facts']['pid1_comm']}, "
                 f"{result['facts']['cgroup_fs']} [{result['facts']['cgroup_controllers']}]")
        checked(["systemctl", "start", "dbus.service"])  # runc and crun reach systemd over the system bus
        start_slice(KUBEPODS, "")
        run_steps(plan, result, write)
    except Exception:  # noqa: BLE001 - the host shows it on every test of this kernel
        result["error"] = traceback.format_exc()
        clean_up()
    write()
    progress(f"done in {result['guest_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
