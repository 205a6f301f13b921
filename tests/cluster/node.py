"""A real one-machine Kubernetes node for the cluster tier: upstream binaries, this machine's kernel.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd (+ runc, CNI bridge) and
the kubelet, each started from the binaries ``.ci/build-cluster`` built (``CMK_CLUSTER_BIN``), with
every state directory under one temporary directory (:class:`ControlPlane` alone serves the systemd tier's
VM, whose kubelet runs in the guest). What upstream fixes elsewhere is listed in
:data:`FIXED_PATHS`: the kubelet's device-plugin directory, containerd's shim sockets, CRI's
network namespaces, the kubelet's container log links; teardown removes what the tier created
there and nothing else. Why each setting is what it is: the shared recipe ``real-cluster.md`` (in
``../shared/docs``) and the comments below; what differs from a production node: docs/dev/tests.md.

A component that does not come up raises :class:`ComponentFailed` with the tail of its log, so the
session fixture fails every test with the reason instead of skipping; so does another kubelet listening
on the machine's ``kubelet.sock``. The teardown runs once: at the session's end, or at SIGTERM or SIGINT
(:class:`SignalTeardown`), after which the process ends as the signal would have ended it.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Self

from api.constants import DEVICE_PLUGIN_DIR, KUBELET_SOCKET_NAME
from tests.cluster import readme

NODE_NAME = "cmk-cluster-node"
#: a private /24 nobody else on these machines uses, on a bridge of our own
POD_SUBNET = "10.213.7.0/24"
MACHINE_LOCK = Path("/var/lib")
SERVICE_RANGE = "10.213.8.0/24"
PAUSE_IMAGE = "localhost/cmk-cluster/pause:3.10"
BUSYBOX_IMAGE = "localhost/cmk-cluster/busybox:static"
CGROUP_V1 = Path("/sys/fs/cgroup")
#: README's variables for its node preparation here: pool sizes any node of two cores or more can have
PREPARED = {"REGISTRY": readme.REGISTRY, "NODE": NODE_NAME, "THREADS_PER_CORE": "1", "EXCLUSIVE_CORES": "1",
            "SHARED_CORES": "0"}
#: Paths upstream does not let us move. Teardown removes each one the tier created (it did not exist
#: before the node came up); one that existed is left, minus the entries the tier added.
FIXED_PATHS = (
    Path("/var/lib/kubelet"),  # pluginapi.DevicePluginPath is a constant: /var/lib/kubelet/device-plugins
    Path("/run/containerd"),  # containerd-shim-runc-v2 sockets (/run/containerd/s/...)
    Path("/var/run/netns"),  # CRI's pod network namespaces (pkg/netns: a constant)
    Path("/var/log/containers"),  # the kubelet's container log links (a constant)
    Path("/var/lib/cni"),  # libcni's result cache
    Path("/run/nri"),
    Path("/etc/cni"),
    Path("/opt/cni"),
    Path("/opt/containerd"),
    Path("/etc/containerd"),
)
#: The kubelet's registration socket (pluginapi.KubeletSocket): one kubelet per machine can serve it.
KUBELET_SOCKET = Path(DEVICE_PLUGIN_DIR) / KUBELET_SOCKET_NAME
#: /proc/net/unix's flag of a listening socket (__SO_ACCEPTCON).
_ACCEPTING = 0x10000
#: sysctls the kubelet sets at start (setupKernelTunables, protectKernelDefaults false); restored after
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")


class ComponentFailed(Exception):
    """A component did not start or the node did not become usable; the message holds its log tail."""


def listener_pids(path: Path) -> list[int]:
    """The processes holding a listening unix socket bound at ``path``, as this network namespace's
    ``/proc/net/unix`` and each process's ``/proc/PID/fd`` show them; [] when none is visible."""
    inodes = set()
    with contextlib.suppress(OSError), open("/proc/net/unix") as table:
        for line in list(table)[1:]:
            fields = line.split(maxsplit=7)  # Num RefCount Protocol Flags Type St Inode Path
            if len(fields) == 8 and fields[7].strip() == str(path) and int(fields[3], 16) & _ACCEPTING:
                inodes.add(f"socket:[{fields[6]}]")
    pids = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                pids.add(int(fd_dir.parent.name))
    return sorted(pids)


def socket_holder(path: Path) -> str | None:
    """Who accepts connections on the unix socket ``path`` ("pid 812 (kubelet)"), or None if nothing does.

    Connecting is the test: a socket file whose listener died (a killed kubelet leaves one) is not held,
    and the next kubelet removes it.
    """
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(5)
        try:
            probe.connect(str(path))
        except OSError:
            return None
    named = []
    for pid in listener_pids(path):
        try:
            named.append(f"pid {pid} ({Path(f'/proc/{pid}/comm').read_text().strip()})")
        except OSError:
            named.append(f"pid {pid}")
    return ", ".join(named) or "a process this session cannot see (another network namespace?)"


def refuse_a_held_kubelet_socket(path: Path = KUBELET_SOCKET) -> None:
    """Raise :class:`ComponentFailed` in one line while another kubelet serves ``path``.

    Our kubelet's start-up sweep would delete that kubelet's plugin sockets and its own, and both
    would serve one device-plugin directory: refuse before anything is started or written.
    """
    holder = socket_holder(path)
    if holder is not None:
        raise ComponentFailed(f"another kubelet listens on {path} ({holder}): stop it before running the "
                              "cluster tier, which needs the machine's device-plugin directory to itself")


class SignalTeardown:
    """``teardown`` run once, by :meth:`run` or at SIGTERM or SIGINT, whichever comes first.

    Python dies at SIGTERM without a word, and pytest stops where a Ctrl-C lands: either way a
    killed run left the node's processes, mounts and cgroups behind. While this is entered, such a
    signal runs the teardown, then ends the process as the signal would have (default action, so a
    shell sees 128+N). A signal during a teardown already under way lets it finish first.
    """

    def __init__(self, teardown: Callable[[], list[str]],
                 signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self._teardown, self._signals = teardown, tuple(signals)
        self._previous: dict[signal.Signals, Any] = {}
        self._state = "pending"  # then "running", then "done"
        self._problems: list[str] = []
        self._signalled: signal.Signals | None = None

    def __enter__(self) -> Self:
        for number in self._signals:
            self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def run(self) -> list[str]:
        """The teardown's problems; it runs on the first call only (later calls return the same list)."""
        if self._state == "pending":
            self._state = "running"
            try:
                self._problems = self._teardown()
            finally:
                self._state = "done"
                if self._signalled is not None:  # it came during this teardown: act on it now
                    self._die(self._signalled)
        return self._problems

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        if self._signalled is None:  # a second signal does not change how the process ends
            self._signalled = signal.Signals(number)
        if self._state == "running":
            return  # the teardown under way goes on; run() ends the process after it
        self.run()
        self._die(self._signalled)

    def _die(self, number: signal.Signals) -> None:
        left = "; left behind: " + "; ".join(self._problems) if self._problems else ""
        print(f"cluster tier: {number.name}: the node is torn down{left}", file=sys.stderr, flush=True)
        outer = self._previous.get(number)
        if callable(outer):  # a teardown entered before this one (the VM tiers' start at collection) runs too
            outer(number, None)
        signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # not reached: the signal's default action ends the process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as err:
        return f"(no log: {err})"


def wait_for(what: str, check: Callable[[], bool], timeout: float, *, alive: Callable[[], None] | None = None,
             interval: float = 0.5) -> None:
    """Poll ``check`` until it holds; ``alive`` raises if the component died meanwhile (no point waiting)."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        try:
            if check():
                return
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(interval)


def iptables_chains() -> set[tuple[str, str, str]]:
    """(tool, table, chain) of every iptables and ip6tables chain, to remove the ones a component adds."""
    found = set()
    for tool in ("iptables", "ip6tables"):
        if shutil.which(f"{tool}-save") is None:
            continue
        table = ""
        for line in subprocess.run([f"{tool}-save"], capture_output=True, text=True, check=False).stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":"):
                found.add((tool, table, line[1:].split()[0]))
    return found


def nft_tables() -> set[str]:
    """``nft list tables`` lines (``table ip filter``); empty without nft."""
    if shutil.which("nft") is None:
        return set()
    listing = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False).stdout
    return {line.strip() for line in listing.splitlines() if line.startswith("table ")}


def host_config_hook(install_dir: Path | str) -> dict[str, Any]:
    """The hook entry ``cmk host-config --runtime containerd`` prints for a node whose install dir is ``install_dir``."""
    result = subprocess.run([sys.executable, "-m", "deviceplugin", "host-config", "--runtime", "containerd",
                             "--install-dir", str(install_dir), "--output", "json"],
                            capture_output=True, text=True, check=True)
    (entry,) = [f for f in json.loads(result.stdout)["runtime_config"] if f["path"].endswith("base-spec.json")]
    (line,) = [x for x in entry["content"].splitlines() if x.startswith("{")]
    hook: dict[str, Any] = json.loads(line)
    return hook


def node_wide_base_spec(bin_dir: Path, install_dir: Path | str) -> dict[str, Any]:
    """What docs/user/node-wide-hook.md tells a containerd user: ``ctr oci spec``, plus ``cmk host-config``'s hook entry."""
    spec: dict[str, Any] = json.loads(subprocess.run([str(bin_dir / "ctr"), "oci", "spec"], capture_output=True,
                                                     text=True, check=True).stdout)
    spec.setdefault("hooks", {}).setdefault("createRuntime", []).append(host_config_hook(install_dir))
    return spec


@dataclass
class Process:
    """One component: its command line, its log, its process (stopped by the pid recorded here)."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                          start_new_session=True)

    def check_alive(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            code = None if self.popen is None else self.popen.returncode
            raise ComponentFailed(f"{self.name} exited (status {code}); last lines of {self.log}:\n{tail(self.log)}")

    def stop(self, timeout: float = 15) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)


@dataclass
class ControlPlane:
    """etcd, the API server, the controller manager and the scheduler: :meth:`up_control_plane` starts them.

    A :class:`Node` adds containerd and the kubelet on this machine; alone, it serves a kubelet elsewhere (the
    systemd tier's VM reaches it through qemu's user network, at an address of :attr:`serving_addresses`).
    """

    bin: Path
    logs: Path
    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cmk-cluster-")))
    processes: dict[str, Process] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    #: Addresses the API server's certificate names besides 127.0.0.1 (where a VM's kubelet reaches it).
    serving_addresses: tuple[str, ...] = ()
    #: The node whose kubelet the token file's ``kubelet`` user is (the Node authorizer's ``system:node:NAME``).
    node_name: str = NODE_NAME
    #: What :meth:`down` reported; None until it ran (it runs once: a second call returns this).
    teardown_problems: list[str] | None = field(default=None, init=False)

    def path(self, *parts: str) -> Path:
        return self.base.joinpath(*parts)

    @property
    def kubeconfig(self) -> Path:
        return self.path("pki", "admin.kubeconfig")

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
                                capture_output=True, text=True, input=input, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: status {result.returncode}\n{result.stderr}")
        return result

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def up_control_plane(self) -> None:
        """The certificates and tokens, then etcd, the API server and the controllers, each waited for."""
        for name in ("etcd", "etcd-peer", "apiserver"):
            self.ports[name] = free_port()
        self._pki()
        self._etcd()
        self._apiserver()
        self._controllers()

    def kubeconfig_text(self, user: str, server: str) -> str:
        """A kubeconfig for ``user`` (a name of :meth:`_pki`'s token file) reaching the API server at ``server``,
        the CA inline: it is read where the control plane's files are not."""
        ca = base64.b64encode(self.path("pki", "ca.crt").read_bytes()).decode()
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "cmk",
            "clusters": [{"name": "cmk", "cluster": {"server": server, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": "cmk", "context": {"cluster": "cmk", "user": user}}],
        })

    def _openssl(self, *args: str) -> None:
        result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ComponentFailed(f"openssl {' '.join(args)}: {result.stderr}")

    def _pki(self) -> None:
        """A CA, the API server's serving cert, its kubelet-client cert, the service-account keys, static tokens."""
        pki = self.path("pki")
        pki.mkdir(parents=True)
        ca_key, ca = pki / "ca.key", pki / "ca.crt"
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
                      "-days", "2", "-subj", "/CN=cmk-cluster-ca")
        for name, subject, extensions in (
            ("apiserver", "/CN=kube-apiserver",
             (f"subjectAltName=IP:127.0.0.1,DNS:localhost,IP:{SERVICE_RANGE.rsplit('.', 1)[0]}.1,"
              + "".join(f"IP:{address}," for address in self.serving_addresses) +
              "DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth")),
            ("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
             "extendedKeyUsage=clientAuth"),
        ):
            ext = pki / f"{name}.ext"
            ext.write_text(extensions + "\n")
            self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(pki / f"{name}.key"),
                          "-out", str(pki / f"{name}.csr"), "-subj", subject)
            self._openssl("x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", str(ca), "-CAkey", str(ca_key),
                          "-CAcreateserial", "-out", str(pki / f"{name}.crt"), "-days", "2", "-extfile", str(ext))
        self._openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
        self._openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
        users = {  # token file: token,user,uid,"group1,group2"
            "admin": ("kubernetes-admin", "system:masters"),
            "controller-manager": ("system:kube-controller-manager", ""),
            "scheduler": ("system:kube-scheduler", ""),
            "kubelet": (f"system:node:{self.node_name}", "system:nodes"),
        }
        lines = []
        for name, (user, groups) in users.items():
            self.tokens[name] = secrets.token_hex(16)
            lines.append(f'{self.tokens[name]},{user},{user},"{groups}"')
        (pki / "tokens.csv").write_text("\n".join(lines) + "\n")
        for name in users:
            (pki / f"{name}.kubeconfig").write_text(
                self.kubeconfig_text(name, f"https://127.0.0.1:{self.ports['apiserver']}"))

    def _start(self, name: str, argv: list[str]) -> Process:
        process = Process(name, argv, self.logs / f"{name}.log")
        self.logs.mkdir(parents=True, exist_ok=True)
        self.processes[name] = process
        process.start()
        return process

    def _wait(self, process: Process, what: str, check: Callable[[], bool], timeout: float) -> None:
        try:
            wait_for(what, check, timeout, alive=process.check_alive)
        except TimeoutError as err:
            raise ComponentFailed(f"{process.name}: {err}; last lines of {process.log}:\n{tail(process.log)}") from None

    def _etcd(self) -> None:
        client, peer = (f"http://127.0.0.1:{self.ports[p]}" for p in ("etcd", "etcd-peer"))
        process = self._start("etcd", [
            str(self.bin / "etcd"), "--name=cmk", f"--data-dir={self.path('etcd')}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=cmk={peer}", "--unsafe-no-fsync", "--log-level=warn",
        ])

        def healthy() -> bool:
            import urllib.request
            with urllib.request.urlopen(f"{client}/health", timeout=2) as answer:
                return bool(json.load(answer).get("health") == "true")
        self._wait(process, "etcd /health", healthy, 60)

    def _apiserver(self) -> None:
        pki = self.path("pki")
        process = self._start("kube-apiserver", [
            str(self.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.ports['apiserver']}",
            f"--cert-dir={pki}", f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}", f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc", f"--service-cluster-ip-range={SERVICE_RANGE}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            # a real cluster allows privileged pods (the admission table has some); the loopback
            # address cannot be the kubernetes Service's endpoint, so no endpoint reconciler
            "--allow-privileged=true", "--endpoint-reconciler-type=none",
            # exec and logs reach the kubelet by the node's address: its name resolves nowhere here
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        ])
        self._wait(process, "kube-apiserver /readyz",
                   lambda: self.kubectl("get", "--raw", "/readyz", check=False, timeout=10).stdout == "ok", 120)

    def _controllers(self) -> None:
        pki = self.path("pki")
        manager = self._start("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), f"--kubeconfig={pki / 'controller-manager.kubeconfig'}",
            "--leader-elect=false", "--use-service-account-credentials=true", "--secure-port=0",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
        ])
        scheduler = self._start("kube-scheduler", [
            str(self.bin / "kube-scheduler"), f"--kubeconfig={pki / 'scheduler.kubeconfig'}",
            "--leader-elect=false", "--secure-port=0",
        ])
        # the service-account controller's first object: proof the controller manager is working
        self._wait(manager, "ServiceAccount default/default",
                   lambda: self.kubectl("-n", "default", "get", "serviceaccount", "default", check=False).returncode == 0,
                   90)
        scheduler.check_alive()

    def log_tails(self) -> str:
        return "\n".join(f"--- {p.name} ({p.log})\n{tail(p.log, 15)}" for p in self.processes.values())

    def down(self) -> list[str]:
        """Remove everything the tier made; returns what it could not remove (the fixture reports it).

        Once: a second call (a signal's teardown after the session's, say) returns the first one's
        report and touches nothing, since by then another session may have the machine.
        """
        if self.teardown_problems is None:
            self.teardown_problems = self._down()
        return self.teardown_problems

    def _down(self) -> list[str]:
        """The control plane's processes stopped, its directory removed: it wrote nowhere else."""
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            if name in self.processes:
                self.processes[name].stop()
        shutil.rmtree(self.base, ignore_errors=True)
        return [f"{self.base} could not be removed"] if self.base.exists() else []


@dataclass
class Node(ControlPlane):
    """The control plane with containerd and the kubelet on this machine. :meth:`up` starts it, :meth:`down` removes it."""

    created: list[Path] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    product_image: str = ""  # the imported cmk-deviceplugin image
    #: containerd's NRI on (a peer that sets cpusets through NRI needs it; the tier keeps it off)
    nri: bool = False
    #: CDI directories containerd reads besides :attr:`cdi_dir` (a peer's fixed ``/var/run/cdi``)
    extra_cdi_dirs: tuple[Path, ...] = ()
    #: the kubelet's ``--v`` from its next start (3 logs each DRA plugin it registers)
    kubelet_verbosity: int = 2
    # iptables chains and nf_tables tables before the kubelet; None until read: a teardown then removes none
    chains: set[tuple[str, str, str]] | None = None
    nft_tables: set[str] | None = None

    # --- where things live ---------------------------------------------------------------------

    @property
    def bridge(self) -> str:
        """This node's CNI bridge, named after its directory (at most 15 characters): teardown removes only it."""
        return "cmk" + self.base.name.removeprefix("cmk-cluster-").replace("_", "")[:12]

    @property
    def containerd_socket(self) -> Path:
        return self.path("containerd", "containerd.sock")

    @property
    def kubelet_root(self) -> Path:
        return self.path("kubelet")

    @property
    def pod_resources_socket(self) -> Path:
        return self.kubelet_root / "pod-resources" / "kubelet.sock"

    @property
    def install_dir(self) -> Path:
        """The node's ``/opt/bin``: the pinner, the infra record (DaemonSet hostPath, containerd's hook path)."""
        return self.path("opt-bin")

    @property
    def cdi_dir(self) -> Path:
        """The node's ``/var/run/cdi``: containerd's first ``cdi_spec_dirs`` entry and the daemon's ``--cdi-dir``."""
        return self.path("cdi")

    def ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(self.bin / "ctr"), "--address", str(self.containerd_socket), "-n", "k8s.io",
                                 *args], capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)}: status {result.returncode}\n{result.stderr}")
        return result

    def up(self, images: Sequence[Path]) -> None:
        """Start every component in order and wait until the node is Ready; ``images`` are archives to import."""
        self.chains, self.nft_tables = iptables_chains(), nft_tables()
        for fixed in FIXED_PATHS:
            if not fixed.exists():
                self.created.append(fixed)
        for name in KUBELET_SYSCTLS:
            with contextlib.suppress(OSError):
                self.sysctls[name] = Path("/proc/sys", name).read_text().strip()
        for name in ("kubelet", "kubelet-healthz"):
            self.ports[name] = free_port()
        self.up_control_plane()
        self._containerd()
        for archive in images:
            self.ctr("images", "import", "--local", str(archive))
        # containerd runs the base spec's hook only for containers the kubelet starts: the pinner goes in first
        self._prepare_from_the_image()
        self._kubelet()

    def _containerd(self) -> None:
        """containerd with CDI on (only our spec dir), runc under cgroupfs, our CNI conflist and sandbox image."""
        d = self.path("containerd")
        (d / "opt").mkdir(parents=True)
        self.path("cni", "net.d").mkdir(parents=True)
        self.cdi_dir.mkdir()
        self.install_dir.mkdir()
        self.path("cni", "net.d", "10-cmk-cluster.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "cmk-cluster",
            "plugins": [{"type": "bridge", "bridge": self.bridge, "isGateway": False, "ipMasq": False,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                                  "dataDir": str(self.path("cni", "ipam"))}}],
        }))
        self._node_wide_hook_spec(d / "cmk-base-spec.json")
        (d / "config.toml").write_text(self.containerd_config())
        process = self._start("containerd", [str(self.bin / "containerd"), f"--config={d / 'config.toml'}",
                                             "--log-level=info"])
        self._wait(process, "containerd answering", lambda: self.ctr("version", check=False).returncode == 0, 60)

    def containerd_config(self) -> str:
        """containerd's config.toml for this node (its directories, CDI dirs, NRI on or off)."""
        d = self.path("containerd")
        runtime = 'plugins."io.containerd.cri.v1.runtime"'
        return f"""\
version = 3
root = "{d / 'root'}"
state = "{d / 'state'}"
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{d / 'containerd.sock.ttrpc'}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'opt'}"
[plugins."io.containerd.nri.v1.nri"]
  disable = {'false' if self.nri else 'true'}
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[{runtime}]
  # this machine's bounding set lacks CAP_SYS_RESOURCE, so nothing may lower an oom_score_adj and runc
  # fails every sandbox (the kubelet's -998): keep each score at or above containerd's own
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = {json.dumps([str(path) for path in (self.cdi_dir, *self.extra_cdi_dirs)])}
[{runtime}.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "{self.path('cni', 'net.d')}"
[{runtime}.containerd]
  default_runtime_name = "runc"
[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  # docs/user/node-wide-hook.md: the node-wide hook through the handler's base spec
  base_runtime_spec = "{d / 'cmk-base-spec.json'}"
[{runtime}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{shutil.which('runc') or 'runc'}"
  Root = "{d / 'runc'}"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{PAUSE_IMAGE}"
"""

    def _prepare_from_the_image(self) -> None:
        """README's step 2 on this node, from the product image through the node's containerd: the pinner in the
        install dir (before the kubelet runs a container the base spec's hook covers), and ``cmk host-config``.

        As written, less the pull (the image is imported, under README's name) and with the node's own ``ctr``
        socket and install dir in place of ``ctr``'s default and ``/opt/bin``.
        """
        self.ctr("images", "tag", self.product_image, readme.image())
        ctr = f"{self.bin / 'ctr'} --address {self.containerd_socket}"
        for line in readme.block("node").splitlines():
            if " image pull " in line:
                continue
            command = re.sub(r"(^|&& )ctr ", rf"\g<1>{ctr} ", line).replace("/opt/bin", str(self.install_dir))
            result = subprocess.run(["bash", "-c", readme.variables(PREPARED) + command],
                                    capture_output=True, text=True, timeout=300, check=False)
            if result.returncode != 0:
                raise ComponentFailed(f"README's node preparation: {command}: status {result.returncode}\n"
                                      f"{result.stdout[-1500:]}{result.stderr[-1500:]}")
        if not (self.install_dir / "cmk").is_file():
            raise ComponentFailed(f"README's node preparation put no pinner in {self.install_dir}")

    def _node_wide_hook_spec(self, target: Path) -> None:
        target.write_text(json.dumps(node_wide_base_spec(self.bin, self.install_dir), indent=2))

    def host_config_hook(self) -> dict[str, Any]:
        return host_config_hook(self.install_dir)

    def _kubelet(self) -> None:
        root = self.kubelet_root
        root.mkdir()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",  # no systemd here
            "failSwapOn": False, "failCgroupV1": False,  # this machine: swap unknown, cgroup v1 hybrid
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,  # imported images stay
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "protectKernelDefaults": False, "readOnlyPort": 0,
            "port": self.ports["kubelet"], "healthzPort": self.ports["kubelet-healthz"],
            "healthzBindAddress": "127.0.0.1",
            "cpuManagerPolicy": "none",  # cmk host-config's kubelet setting
            "podLogsDir": str(self.path("pod-logs")),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.path("pki", "ca.crt"))}},
            "authorization": {"mode": "AlwaysAllow"},
            "shutdownGracePeriod": "0s", "resolvConf": "/etc/resolv.conf",
        }
        (root / "config.yaml").write_text(json.dumps(config, indent=2))
        self.start_kubelet()
        kubelet = self.processes["kubelet"]
        self._wait(kubelet, f"node {NODE_NAME} Ready", self.node_ready, 180)

    def start_kubelet(self) -> None:
        root = self.kubelet_root
        self._start("kubelet", [
            str(self.bin / "kubelet"), f"--config={root / 'config.yaml'}", f"--root-dir={root}",
            f"--kubeconfig={self.path('pki', 'kubelet.kubeconfig')}", f"--hostname-override={NODE_NAME}",
            f"--cert-dir={root / 'pki'}", f"--v={self.kubelet_verbosity}",
        ])

    def reconfigure_kubelet(self, **settings: Any) -> None:
        """Restart the kubelet with ``settings`` changed in its KubeletConfiguration (``None`` drops one).

        A CPU manager policy change also drops the kubelet's CPU manager checkpoint, as the kubelet
        asks an operator to: it refuses to start on a checkpoint of another policy. No pod may run.
        """
        config_file = self.kubelet_root / "config.yaml"
        config = json.loads(config_file.read_text())
        for key, value in settings.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        self.processes["kubelet"].stop()
        config_file.write_text(json.dumps(config, indent=2))
        (self.kubelet_root / "cpu_manager_state").unlink(missing_ok=True)
        self.start_kubelet()
        self._wait(self.processes["kubelet"], "the kubelet's healthz", self.kubelet_healthy, 180)
        self._wait(self.processes["kubelet"], f"node {NODE_NAME} Ready", self.node_ready, 180)

    def kubelet_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['kubelet-healthz']}/healthz", timeout=2) as answer:
                return bool(answer.read() == b"ok")
        except OSError:
            return False

    def restart_kubelet(self) -> float:
        """Stop the kubelet (SIGTERM, as systemd does) and start it again; returns the monotonic start time."""
        self.processes["kubelet"].stop()
        started = time.monotonic()
        self.start_kubelet()
        return started

    def node_ready(self) -> bool:
        result = self.kubectl("get", "node", NODE_NAME, "-o",
                              "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False, timeout=10)
        return result.stdout == "True"

    # --- teardown ------------------------------------------------------------------------------

    def _down(self) -> list[str]:
        problems: list[str] = []
        kubelet = self.processes.get("kubelet")
        if kubelet is not None and kubelet.popen is not None and kubelet.popen.poll() is None:
            # the kubelet stops its pods itself (CNI DEL, volumes, cgroups) while it still runs
            self.kubectl("delete", "daemonsets", "--all", "--all-namespaces", "--wait=false", check=False, timeout=60)
            self.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=0", "--force",
                         "--wait=false", check=False, timeout=60)
            with contextlib.suppress(TimeoutError):
                wait_for("every pod stopped", lambda: not self.ctr("tasks", "ls", "-q", check=False).stdout.split(),
                         60)
        for name in ("kubelet", "kube-scheduler", "kube-controller-manager"):
            if name in self.processes:
                self.processes[name].stop()
        if "containerd" in self.processes:
            self._remove_containers(problems)
            self.processes["containerd"].stop()
        for name in ("kube-apiserver", "etcd"):
            if name in self.processes:
                self.processes[name].stop()
        self._kill_leftovers(problems)
        self._unmount(problems)
        self._remove_cgroups(problems)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        self._remove_chains(problems)
        for name, value in self.sysctls.items():
            with contextlib.suppress(OSError):
                Path("/proc/sys", name).write_text(value)
        self._remove_files(problems)
        return problems

    def _remove_containers(self, problems: list[str]) -> None:
        """Every task killed and every container and sandbox removed through containerd (the kubelet is gone)."""
        tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.split()
        for task in tasks:
            self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
        for task in tasks:
            for _ in range(50):
                if self.ctr("tasks", "delete", task, check=False).returncode == 0:
                    break
                time.sleep(0.2)
        for container in self.ctr("containers", "ls", "-q", check=False).stdout.split():
            self.ctr("containers", "rm", container, check=False)
        for sandbox in self.ctr("sandboxes", "ls", "-q", check=False).stdout.split():
            self.ctr("sandboxes", "rm", "--force", sandbox, check=False)

    def _kill_leftovers(self, problems: list[str]) -> None:
        """Processes (shims, a component that ignored SIGTERM) whose command line names this node's directory.

        Only those: the binaries' directory is shared by every session on the machine, the node's
        directory is this session's alone.
        """
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(self.base) in cmdline:
                problems.append(f"process {proc.name} ({cmdline[:120]}) was still running: killed")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc.name), signal.SIGKILL)

    def _unmount(self, problems: list[str]) -> None:
        """Every mount under our directories and the fixed ones we created, deepest first."""
        roots = (str(self.base), "/var/lib/kubelet", "/run/containerd", "/var/run/netns", "/run/netns")
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
        for point in sorted({p for p in points if p.startswith(roots)}, key=len, reverse=True):
            if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)

    def _remove_cgroups(self, problems: list[str]) -> None:
        """The kubelet's ``kubepods`` cgroups in every v1 hierarchy and the unified one, leaf first."""
        for hierarchy in CGROUP_V1.iterdir():
            top = hierarchy / "kubepods"
            if not top.is_dir():
                continue
            for directory, _, _ in os.walk(top, topdown=False):
                try:
                    Path(directory).rmdir()
                except OSError as err:
                    problems.append(f"cgroup {directory}: {err.strerror}")

    def _remove_chains(self, problems: list[str]) -> None:
        """The chains the kubelet added (its KUBE-*-CANARY chains), and the rules jumping to them."""
        if self.chains is None or self.nft_tables is None:
            return  # stopped before they were read: every chain and table is someone else's
        for tool, table, chain in sorted(iptables_chains() - self.chains):
            rules = subprocess.run([f"{tool}-save", "-t", table], capture_output=True, text=True,
                                   check=False).stdout.splitlines()
            for rule in rules:
                if rule.startswith("-A ") and f"-j {chain}" in rule:
                    subprocess.run([tool, "-t", table, "-D", *rule[3:].split()], capture_output=True, check=False)
            subprocess.run([tool, "-t", table, "-F", chain], capture_output=True, check=False)
            if subprocess.run([tool, "-t", table, "-X", chain], capture_output=True, check=False).returncode != 0:
                problems.append(f"{tool} chain {table}/{chain} could not be removed")
        for table in sorted(nft_tables() - self.nft_tables):  # the kubelet's probes create whole (empty) tables
            if subprocess.run(["nft", "delete", *table.split()], capture_output=True, check=False).returncode:
                problems.append(f"nft {table} could not be removed")

    def _remove_files(self, problems: list[str]) -> None:
        for fixed in self.created:
            if fixed.exists() or fixed.is_symlink():
                shutil.rmtree(fixed, ignore_errors=True)
        links = Path("/var/log/containers")
        if links.is_dir():
            for link in links.iterdir():
                if link.is_symlink() and os.readlink(link).startswith(str(self.base)):
                    link.unlink()
        shutil.rmtree(self.base, ignore_errors=True)
        for leftover in [*self.created, self.base]:
            if leftover.exists():
                problems.append(f"{leftover} could not be removed")


@contextlib.contextmanager
def running_node(bin_dir: Path, logs: Path, images: Sequence[Path], *, product_image: str = "",
                 kubelet_socket: Path = KUBELET_SOCKET, nri: bool = False,
                 extra_cdi_dirs: Sequence[Path] = ()) -> Iterator[Node]:
    """A node that is up for the ``with`` body and gone after, whatever happened during bring-up,
    and gone too at SIGTERM or SIGINT (:class:`SignalTeardown`).

    ``logs`` (the components' logs) is outside the node's directory so that they outlive it. Refused
    while a kubelet not of this tier listens on ``kubelet_socket``: checked once the lock is ours, so
    another session of the tier is waited for rather than refused. ``nri`` and ``extra_cdi_dirs``: see :class:`Node`.
    """
    # One node per machine: the kubelet's device-plugin directory, the pod cgroups and the netns
    # directory are the machine's. The lock is on the directory that holds /var/lib/kubelet, the same
    # for every session whatever binaries it runs, and leaves no file behind.
    # Sessions of before took the build cache's directory instead: taken too, first, so that they
    # and this one exclude each other as well.
    locks = [os.open(path, os.O_RDONLY) for path in (Path(bin_dir).resolve().parent.parent, MACHINE_LOCK)]
    try:
        for lock in locks:
            fcntl.flock(lock, fcntl.LOCK_EX)
        refuse_a_held_kubelet_socket(kubelet_socket)
        yield from _node(Node(bin_dir, logs, product_image=product_image, nri=nri,
                              extra_cdi_dirs=tuple(extra_cdi_dirs)), images)
    finally:
        for lock in locks:
            os.close(lock)


def _node(node: Node, images: Sequence[Path]) -> Iterator[Node]:
    with SignalTeardown(node.down) as teardown:
        try:
            node.up(images)
        except BaseException:
            teardown.run()
            raise
        try:
            yield node
        finally:
            problems = teardown.run()
            if problems:
                raise AssertionError("teardown left things behind:\n" + "\n".join(problems))
