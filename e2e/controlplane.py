"""A real, local Kubernetes control plane for usher's end-to-end tests and benchmarks.

Why this exists: usher is a scheduler, so its e2e suite must talk to a real
kube-apiserver (RBAC, admission plugins, the DRA ResourceClaim controller,
real watch semantics), not a fake. The machine has no Docker, so every
component runs as a plain process from the pinned binaries that
``e2e/build-binaries.sh`` puts in ``${USHER_CACHE:-~/.cache/usher}/bin/<version>/``.
kwok stands in for kubelets: it keeps fake nodes Ready (node leases) and moves
pods bound to them to Running.

Everything of one control plane lives under one work directory and listens on
free loopback ports, so two control planes (two pytest sessions, or a test that
starts a second one) never share a port or a file.

Usage::

    with controlplane.start() as cp:
        cp.add_kwok_node("node-1")
        ns = cp.create_namespace("demo")
        cp.kubectl("-n", ns, "get", "pods")

or from a shell: ``python -m e2e.controlplane up [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import http.client
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from yaml import safe_load as yaml_load

__all__ = [
    "DEFAULT_CONTROLLERS",
    "KWOK_NODE_ANNOTATION",
    "ApiError",
    "Binaries",
    "Component",
    "ComponentError",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "MissingBinaryError",
    "WaitTimeoutError",
    "cache_dir",
    "free_ports",
    "read_versions",
    "running",
    "start",
    "wait_for",
]

E2E_DIR = Path(__file__).resolve().parent
VERSIONS_FILE = E2E_DIR / "versions.env"
BUILD_COMMAND = "bash e2e/build-binaries.sh"

#: Annotation kwok selects the nodes it manages by (``--manage-nodes-with-annotation-selector``).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
#: The apiserver's ClusterIP, first address of the service range (kept in the serving cert's SANs).
KUBERNETES_SERVICE_IP = "10.0.0.1"
#: kwok's pod IP range; disjoint from the service range so addresses are unambiguous.
POD_CIDR = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: Added to every new Node by the TaintNodesByCondition admission plugin and removed by
#: kcm's node-lifecycle-controller once the node is Ready.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
#: kubelet's default lease duration; kwok renews every quarter of it (10 s). Shorter would
#: make the lease test faster but multiplies apiserver writes in benchmarks with many nodes.
NODE_LEASE_SECONDS = 40

#: kube-controller-manager controllers that matter to a scheduler's world (names as of
#: v1.37, see ``kube-controller-manager --help``). Deliberately no
#: taint-eviction-controller: a stopped kwok must not make pods vanish under a test.
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "serviceaccount-controller",  # the `default` ServiceAccount; pods are rejected without it
    "serviceaccount-token-controller",
    "namespace-controller",  # namespace deletion
    "garbage-collector-controller",  # ownerReferences (claims of deleted pods, ReplicaSet pods)
    "resourceclaim-controller",  # DRA: ResourceClaims from templates, pod.status.resourceClaimStatuses
    "node-lifecycle-controller",  # removes the not-ready taint, watches node leases
    "root-ca-certificate-publisher-controller",  # kube-root-ca.crt ConfigMaps
    "clusterrole-aggregation-controller",  # admin/edit/view roles
    "replicaset-controller",
    "deployment-controller",
    "job-controller",
    "pod-garbage-collector-controller",  # pods of deleted nodes
    "disruption-controller",  # PodDisruptionBudget status, read by preemption
)

#: kwok stage files (relative to the cached ``kwok-stages`` copy of the kwok module's
#: ``kustomize/stage``). The "fast" pod stages have no delays, which keeps tests and
#: benchmarks quick; the node heartbeat relies on leases (``--node-lease-duration-seconds``).
KWOK_STAGE_FILES: tuple[str, ...] = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)

T = TypeVar("T")


# --------------------------------------------------------------------------- errors


class ControlPlaneError(RuntimeError):
    """Base class of everything this module raises on purpose."""


class MissingBinaryError(ControlPlaneError):
    """A pinned binary is not in the cache; the message says how to build it."""


class ComponentError(ControlPlaneError):
    """A component exited or did not get ready; the message carries its log tail."""


class ApiError(ControlPlaneError):
    """The apiserver answered a raw request with an error status."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body.strip()[:2000]}")
        self.status = status
        self.method = method
        self.path = path
        self.body = body


class KubectlError(ControlPlaneError):
    """kubectl exited non-zero; the message carries its stderr."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(f"kubectl {shlex.join(args)} exited {returncode}: {stderr.strip() or stdout.strip()}")
        self.args_ = tuple(args)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


class WaitTimeoutError(TimeoutError):
    """A `wait_for` condition did not become true in time."""


# --------------------------------------------------------------------------- helpers


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.1,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Why: e2e tests must wait for a condition, never sleep for a guessed time;
    short polls keep fast paths fast and the timeout bounds slow ones.
    Exceptions listed in ``ignore`` count as "not yet" (and the last one is
    quoted on timeout); any other exception propagates at once.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except ignore as error:
            last_error = error
        else:
            if value:
                return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            detail = f" (last error: {last_error!r})" if last_error is not None else ""
            raise WaitTimeoutError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(min(interval, remaining))


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse the ``KEY=value`` pins of e2e/versions.env (the one place versions live)."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        versions[key.strip()] = value.strip().strip("'\"")
    return versions


def cache_dir() -> Path:
    """Where build-binaries.sh caches binaries: ``${USHER_CACHE:-~/.cache/usher}``."""
    return Path(os.environ.get("USHER_CACHE") or "~/.cache/usher").expanduser()


_PORT_LOCK = threading.Lock()
_PORTS_HANDED_OUT: set[int] = set()


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free loopback TCP ports.

    Why: fixed ports would make two control planes clash. All sockets are held
    open together so the kernel hands out distinct ports, and ports already
    handed out by this process are never reused (parallel starts in threads).
    Another process could still grab a port before the component binds it;
    the window is milliseconds and the component would fail loudly.
    """
    sockets: list[socket.socket] = []
    ports: list[int] = []
    with _PORT_LOCK:
        try:
            while len(ports) < count:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
                if port not in _PORTS_HANDED_OUT:
                    _PORTS_HANDED_OUT.add(port)
                    ports.append(port)
        finally:
            for sock in sockets:
                sock.close()
    return ports


def _log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, for error messages that explain themselves."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as error:
        return f"(cannot read {path}: {error})"
    return "\n".join(data.splitlines()[-lines:])


def _http_get(
    scheme: str, port: int, path: str, context: ssl.SSLContext | None = None, timeout: float = 2.0
) -> tuple[int, bytes]:
    """One GET against a loopback endpoint, for health checks."""
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _insecure_context() -> ssl.SSLContext:
    """TLS without verification, only for self-signed /healthz endpoints of kcm and the scheduler."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


# --------------------------------------------------------------------------- binaries


@dataclass(frozen=True)
class Binaries:
    """Paths of the pinned binaries in the cache (see e2e/versions.env)."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    kwok_stages: Path

    @classmethod
    def locate(cls, cache: Path | None = None, versions: Mapping[str, str] | None = None) -> Binaries:
        """Resolve paths from the version pins; nothing is checked until `require`."""
        root = (cache or cache_dir()) / "bin"
        pins = dict(versions) if versions is not None else read_versions()
        kube = root / pins["KUBERNETES_VERSION"]
        kwok = root / pins["KWOK_VERSION"]
        return cls(
            etcd=root / pins["ETCD_VERSION"] / "etcd",
            kube_apiserver=kube / "kube-apiserver",
            kube_controller_manager=kube / "kube-controller-manager",
            kube_scheduler=kube / "kube-scheduler",
            kubectl=kube / "kubectl",
            kwok=kwok / "kwok",
            kwok_stages=kwok / "kwok-stages",
        )

    def require(self, *names: str) -> None:
        """Fail with the build command when any named binary (field name) is missing."""
        missing: list[str] = []
        for name in names:
            path: Path = getattr(self, name)
            if name == "kwok_stages":
                absent = [f for f in KWOK_STAGE_FILES if not (path / f).is_file()]
                if absent:
                    missing.append(f"kwok stage files {', '.join(absent)} under {path}")
            elif not (path.is_file() and os.access(path, os.X_OK)):
                missing.append(f"{path.name} at {path}")
        if missing:
            raise MissingBinaryError(
                "missing control-plane binaries: "
                + "; ".join(missing)
                + f". Build the pinned versions with `{BUILD_COMMAND}` from the repository root"
                " (a cold Kubernetes build takes 15-30 min; set USHER_CACHE to use another cache)."
            )


# --------------------------------------------------------------------------- certificates


_OPENSSL_CONFIG = "[req]\ndistinguished_name = dn\n[dn]\n"


@dataclass(frozen=True)
class Pki:
    """File paths of the control plane's keys and certificates (all made with the openssl CLI).

    Two CAs, as in a real cluster: ``ca`` signs the serving certificate (and is
    the root CA published to pods), ``client_ca`` signs client certificates the
    apiserver accepts. ``sa_key``/``sa_pub`` sign and verify ServiceAccount tokens.
    """

    directory: Path
    ca_crt: Path
    ca_key: Path
    client_ca_crt: Path
    client_ca_key: Path
    serving_crt: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def generate(cls, directory: Path) -> Pki:
        """Create all keys and certificates; EC P-256 keys because they take no time to make."""
        if shutil.which("openssl") is None:
            raise ControlPlaneError("the `openssl` CLI is needed to make certificates (apt-get install openssl)")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "openssl.cnf").write_text(_OPENSSL_CONFIG)
        pki = cls(
            directory=directory,
            ca_crt=directory / "ca.crt",
            ca_key=directory / "ca.key",
            client_ca_crt=directory / "client-ca.crt",
            client_ca_key=directory / "client-ca.key",
            serving_crt=directory / "apiserver.crt",
            serving_key=directory / "apiserver.key",
            sa_key=directory / "sa.key",
            sa_pub=directory / "sa.pub",
        )
        pki._ca(pki.ca_key, pki.ca_crt, "usher-e2e-ca")
        pki._ca(pki.client_ca_key, pki.client_ca_crt, "usher-e2e-client-ca")
        sans = ",".join(
            [
                "DNS:localhost",
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
                "IP:127.0.0.1",
                f"IP:{KUBERNETES_SERVICE_IP}",
            ]
        )
        pki._leaf(
            pki.serving_key, pki.serving_crt, "/CN=kube-apiserver", pki.ca_crt, pki.ca_key,
            usage="serverAuth", sans=sans,
        )  # fmt: skip
        pki._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(pki.sa_key))
        pki._openssl("pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))
        return pki

    def client_cert(self, name: str, common_name: str, organization: str | None = None) -> tuple[Path, Path]:
        """Make a client certificate (CN = user, O = group) signed by the client CA."""
        key = self.directory / f"{name}.key"
        crt = self.directory / f"{name}.crt"
        subject = (f"/O={organization}" if organization else "") + f"/CN={common_name}"
        self._leaf(key, crt, subject, self.client_ca_crt, self.client_ca_key, usage="clientAuth")
        return crt, key

    def _openssl(self, *args: str) -> None:
        proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ControlPlaneError(f"openssl {shlex.join(args)} failed: {proc.stderr.strip()}")

    def _ca(self, key: Path, crt: Path, common_name: str) -> None:
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
        self._openssl(
            "req", "-config", str(self.directory / "openssl.cnf"), "-x509", "-new", "-key", str(key),
            "-subj", f"/CN={common_name}", "-days", "3650",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-out", str(crt),
        )  # fmt: skip

    def _leaf(
        self, key: Path, crt: Path, subject: str, ca_crt: Path, ca_key: Path, *, usage: str, sans: str | None = None
    ) -> None:
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
        extensions = [
            "-addext", "basicConstraints=critical,CA:FALSE",
            "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
            "-addext", f"extendedKeyUsage={usage}",
        ]  # fmt: skip
        if sans:
            extensions += ["-addext", f"subjectAltName={sans}"]
        self._openssl(
            "req", "-config", str(self.directory / "openssl.cnf"), "-x509", "-new", "-key", str(key),
            "-CA", str(ca_crt), "-CAkey", str(ca_key), "-set_serial", str(secrets.randbits(63)),
            "-subj", subject, "-days", "365", *extensions, "-out", str(crt),
        )  # fmt: skip
        key.chmod(0o600)


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    user: str,
    ca: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
) -> Path:
    """A kubeconfig with the credentials embedded, so the file works when copied elsewhere:
    a client certificate (``cert``/``key``), a bearer ``token``, or neither (e.g. through a proxy).

    Written as JSON, which is valid YAML for kubectl and client libraries and
    needs no YAML library here.
    """

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    cluster: dict[str, str] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = b64(ca)
    credentials: dict[str, str] = {}
    if cert is not None and key is not None:
        credentials = {"client-certificate-data": b64(cert), "client-key-data": b64(key)}
    if token:
        credentials["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "usher-e2e", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "usher-e2e", "context": {"cluster": "usher-e2e", "user": user}}],
        "current-context": "usher-e2e",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------- processes


@dataclass
class Component:
    """One running control-plane process, in its own process group, logging to a file."""

    name: str
    argv: list[str]
    process: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The end of this component's log."""
        return _log_tail(self.log_path, lines)

    def ensure_running(self) -> None:
        """Raise `ComponentError` with the log tail if the process has exited."""
        code = self.process.poll()
        if code is not None:
            raise ComponentError(
                f"{self.name} exited with code {code}; last lines of {self.log_path}:\n{self.log_tail()}"
            )


def _spawn(name: str, argv: list[str], logs_dir: Path, cwd: Path) -> Component:
    """Start one component with stdout+stderr appended to ``logs/<name>.log``.

    Its own session (process group) lets `stop` signal it and anything it
    forks at once, and keeps terminal Ctrl-C from reaching it behind our back.
    When started from the main thread, ``setpriv --pdeathsig KILL`` also makes
    the kernel kill it if this Python process dies without running atexit
    hooks (SIGKILL, a pytest-timeout ``os._exit``). Not from other threads:
    the parent-death signal fires when the *thread* that forked exits.
    """
    log_path = logs_dir / f"{name}.log"
    prefix: list[str] = []
    setpriv = shutil.which("setpriv")
    if setpriv and threading.current_thread() is threading.main_thread():
        prefix = [setpriv, "--pdeathsig", "KILL"]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with log_path.open("ab") as log:
        log.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} {shlex.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            prefix + argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    return Component(name=name, argv=argv, process=process, log_path=log_path)


def _terminate(components: Sequence[Component], grace: float) -> None:
    """SIGTERM every component's process group, then SIGKILL what outlives ``grace``.

    All at once rather than one by one: the state is thrown away anyway, and
    a sequential graceful shutdown of the apiserver alone can take seconds.
    """
    for component in components:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(component.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for component in components:
        try:
            component.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(component.process.pid, signal.SIGKILL)
            component.process.wait()
        # Strays the component may have forked in its group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(component.process.pid, signal.SIGKILL)


_LIVE_LOCK = threading.Lock()
_LIVE: set[ControlPlane] = set()


def _stop_all_at_exit() -> None:
    """atexit hook: no control plane outlives the Python process that started it."""
    with _LIVE_LOCK:
        planes = list(_LIVE)
    for plane in planes:
        with contextlib.suppress(Exception):
            plane.stop(grace=3.0)


atexit.register(_stop_all_at_exit)


# --------------------------------------------------------------------------- control plane


@dataclass
class Ports:
    """The loopback ports of one control plane (also written to ``<workdir>/ports.json``)."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    kcm: int
    kwok: int
    scheduler: int


@dataclass(eq=False)
class ControlPlane:
    """A running local control plane; build one with `start`.

    ``kubeconfig`` holds admin credentials (group system:masters); ``server``
    is the apiserver URL; component logs are in ``logs_dir``. `stop` is
    idempotent and also runs at interpreter exit.
    """

    workdir: Path
    binaries: Binaries
    ports: Ports
    kcm_enabled: bool = True
    kwok_enabled: bool = True
    scheduler_enabled: bool = False
    controllers: tuple[str, ...] = DEFAULT_CONTROLLERS
    components: list[Component] = field(default_factory=list)
    #: Seconds from `start` being called to everything being ready.
    startup_seconds: float = 0.0
    #: Seconds at which each startup phase finished, relative to the start.
    timings: dict[str, float] = field(default_factory=dict)
    _pki: Pki | None = field(default=None, init=False, repr=False)
    _ssl: ssl.SSLContext | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def logs_dir(self) -> Path:
        """``<workdir>/logs``: one ``<component>.log`` per process."""
        return self.workdir / "logs"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (``<workdir>/kubeconfig``), credentials embedded."""
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        """The apiserver URL."""
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def pki(self) -> Pki:
        """Keys and certificates (the CA in ``pki.ca_crt`` verifies the apiserver)."""
        if self._pki is None:
            raise ControlPlaneError("control plane not started")
        return self._pki

    @property
    def node_lifecycle_controller(self) -> bool:
        """Whether kcm runs the controller that lifts the not-ready taint off new nodes."""
        return self.kcm_enabled and "node-lifecycle-controller" in self.controllers

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- lifecycle

    def is_running(self) -> bool:
        """True when every started component is still alive."""
        return bool(self.components) and all(c.alive() for c in self.components)

    def ensure_running(self) -> None:
        """Raise `ComponentError` (with its log tail) if any component has exited."""
        for component in self.components:
            component.ensure_running()

    def component(self, name: str) -> Component:
        """The running component called ``name`` (etcd, kube-apiserver, kube-controller-manager, kwok, ...)."""
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(name)

    def stop(self, grace: float = 10.0) -> None:
        """Stop all components: SIGTERM, then SIGKILL after ``grace`` seconds. The workdir is kept."""
        with self._lock:
            components = list(reversed(self.components))
            self.components = []
        # Clients first, then the apiserver, then etcd: each tier shuts down while
        # what it talks to is still up, which keeps the logs free of shutdown noise.
        deadline = time.monotonic() + grace
        tiers = (
            [c for c in components if c.name not in {"kube-apiserver", "etcd"}],
            [c for c in components if c.name == "kube-apiserver"],
            [c for c in components if c.name == "etcd"],
        )
        for tier in tiers:
            if tier:
                _terminate(tier, max(0.5, deadline - time.monotonic()))
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def _start(
        self,
        *,
        extra_apiserver_args: Sequence[str],
        extra_kcm_args: Sequence[str],
        extra_kwok_args: Sequence[str],
        extra_scheduler_args: Sequence[str],
        timeout: float,
    ) -> None:
        """Bring the components up in dependency order, overlapping what can overlap."""
        t0 = time.monotonic()

        def mark(phase: str) -> None:
            self.timings[phase] = round(time.monotonic() - t0, 3)

        if (self.workdir / "etcd").exists():
            raise ControlPlaneError(f"{self.workdir} already holds a control plane's state; use a fresh work directory")
        needed = ["etcd", "kube_apiserver", "kubectl"]
        if self.kcm_enabled:
            needed.append("kube_controller_manager")
        if self.kwok_enabled:
            needed += ["kwok", "kwok_stages"]
        if self.scheduler_enabled:
            needed.append("kube_scheduler")
        self.binaries.require(*needed)
        optional = {"kcm": self.kcm_enabled, "kwok": self.kwok_enabled, "scheduler": self.scheduler_enabled}
        for sub in ["logs", "etcd", "apiserver", *(name for name, on in optional.items() if on)]:
            (self.workdir / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.workdir / "ports.json").write_text(json.dumps(self.ports.__dict__, indent=2) + "\n")
        with _LIVE_LOCK:
            _LIVE.add(self)

        etcd = self._start_etcd()
        # Certificates while etcd boots.
        pki = self._pki = Pki.generate(self.workdir / "pki")
        admin_crt, admin_key = pki.client_cert("admin", "usher-e2e-admin", "system:masters")
        write_kubeconfig(
            self.kubeconfig, server=self.server, ca=pki.ca_crt, cert=admin_crt, key=admin_key, user="admin"
        )
        context = ssl.create_default_context(cafile=str(pki.ca_crt))
        context.load_cert_chain(str(admin_crt), str(admin_key))
        self._ssl = context
        mark("certificates")
        etcd_port = self.ports.etcd_client
        self._wait_ready(etcd, timeout, "etcd /health", lambda: _http_get("http", etcd_port, "/health")[0] == 200)
        mark("etcd")

        apiserver = self._start_apiserver(extra_apiserver_args)
        self._wait_ready(apiserver, timeout, "kube-apiserver /readyz", self._apiserver_ready)
        mark("kube-apiserver")

        # The rest only need the apiserver: start them together, then wait for each.
        waits: list[tuple[Component, str, Callable[[], bool]]] = []
        if self.kcm_enabled:
            waits.append(self._start_kcm(extra_kcm_args))
        if self.kwok_enabled:
            waits.append(self._start_kwok(extra_kwok_args))
        if self.scheduler_enabled:
            waits.append(self._start_scheduler(extra_scheduler_args))
        for component, what, check in waits:
            self._wait_ready(component, timeout, what, check)
            mark(component.name)

        # The ServiceAccount admission plugin rejects pods in a namespace until its
        # `default` ServiceAccount exists.
        self._ensure_default_service_account("default", timeout)
        mark("default-serviceaccount")
        self.startup_seconds = round(time.monotonic() - t0, 3)

    def _component_kubeconfig(self, name: str, common_name: str, organization: str | None = None) -> Path:
        """A client certificate and kubeconfig for one component, under ``<workdir>/<dir>/``."""
        crt, key = self.pki.client_cert(name, common_name, organization)
        path = self.workdir / {"kube-controller-manager": "kcm", "kube-scheduler": "scheduler"}.get(name, name)
        path = path / "kubeconfig"
        write_kubeconfig(path, server=self.server, ca=self.pki.ca_crt, cert=crt, key=key, user=name)
        return path

    def _start_etcd(self) -> Component:
        p = self.ports
        return self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=usher-e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{p.etcd_client}",
                f"--advertise-client-urls=http://127.0.0.1:{p.etcd_client}",
                f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                f"--initial-cluster=usher-e2e=http://127.0.0.1:{p.etcd_peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",  # test data: durability costs time and buys nothing
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self, extra_args: Sequence[str]) -> Component:
        pki = self.pki
        return self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports.apiserver}",
                f"--cert-dir={self.workdir / 'apiserver'}",
                f"--tls-cert-file={pki.serving_crt}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.client_ca_crt}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--allow-privileged=true",
                # The `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints
                # validation rejects (loopback): skip reconciling instead of logging errors.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *extra_args,  # last, so callers can override any default flag
            ],
        )

    def _start_kcm(self, extra_args: Sequence[str]) -> tuple[Component, str, Callable[[], bool]]:
        kubeconfig = self._component_kubeconfig("kube-controller-manager", "system:kube-controller-manager")
        kcm = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                f"--controllers={','.join(self.controllers)}",
                # Each controller acts as its own ServiceAccount with the bootstrap
                # RBAC roles, as in kubeadm clusters: RBAC gaps show up here too.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca_crt}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.kcm}",
                f"--cert-dir={self.workdir / 'kcm'}",
                # Benchmarks create claims and delete pods by the thousand.
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                *extra_args,
            ],
        )
        port, insecure = self.ports.kcm, _insecure_context()
        return kcm, "kube-controller-manager /healthz", lambda: _http_get("https", port, "/healthz", insecure)[0] == 200

    def _start_kwok(self, extra_args: Sequence[str]) -> tuple[Component, str, Callable[[], bool]]:
        # kwok patches status of nodes and pods, renews leases and deletes pods: an admin.
        kubeconfig = self._component_kubeconfig("kwok", "kwok-controller", "system:masters")
        config = self.workdir / "kwok" / "kwok.yaml"
        config.write_text(self._kwok_stages())
        port = self.ports.kwok
        kwok = self._spawn(
            "kwok",
            [
                str(self.binaries.kwok),
                f"--kubeconfig={kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
                # kwok's own server (healthz, kubelet-like API) doubles as the nodes' kubelet port.
                f"--server-address=127.0.0.1:{port}",
                f"--node-port={port}",
                "--node-ip=127.0.0.1",
                f"--cidr={POD_CIDR}",
                # Without a lease duration kwok renews no node leases, and the
                # node-lifecycle-controller marks its nodes NotReady after ~50 s.
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
                *extra_args,
            ],
        )
        return kwok, "kwok /healthz", lambda: _http_get("http", port, "/healthz")[0] == 200

    def _start_scheduler(self, extra_args: Sequence[str]) -> tuple[Component, str, Callable[[], bool]]:
        kubeconfig = self._component_kubeconfig("kube-scheduler", "system:kube-scheduler")
        scheduler = self._spawn(
            "kube-scheduler",
            [
                str(self.binaries.kube_scheduler),
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.scheduler}",
                f"--cert-dir={self.workdir / 'scheduler'}",
                *extra_args,
            ],
        )
        port, insecure = self.ports.scheduler, _insecure_context()
        return scheduler, "kube-scheduler /healthz", lambda: _http_get("https", port, "/healthz", insecure)[0] == 200

    def _spawn(self, name: str, argv: list[str]) -> Component:
        component = _spawn(name, argv, self.logs_dir, self.workdir)
        with self._lock:
            self.components.append(component)
        return component

    def _wait_ready(self, component: Component, timeout: float, what: str, check: Callable[[], bool]) -> None:
        """Wait for ``check`` while failing fast, with the log tail, if ``component`` exits."""

        def probe() -> bool:
            component.ensure_running()
            return check()

        try:
            wait_for(probe, timeout, what, interval=0.05, ignore=(OSError, http.client.HTTPException))
        except WaitTimeoutError as error:
            raise ComponentError(
                f"{component.name} did not get ready: {error}; last lines of {component.log_path}:\n"
                f"{component.log_tail()}"
            ) from None

    def _apiserver_ready(self) -> bool:
        status, _ = _http_get("https", self.ports.apiserver, "/readyz", self._ssl)
        return status == 200

    def _kwok_stages(self) -> str:
        """kwok's config: the stage documents of the pinned kwok version, concatenated."""
        docs = [(self.binaries.kwok_stages / f).read_text().strip() for f in KWOK_STAGE_FILES]
        header = "# Generated by e2e/controlplane.py from " + str(self.binaries.kwok_stages) + "\n"
        return header + "\n---\n".join(docs) + "\n"

    def _ensure_default_service_account(self, namespace: str, timeout: float) -> None:
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        if not (self.kcm_enabled and "serviceaccount-controller" in self.controllers):
            # Nobody else will make it: do the serviceaccount-controller's job.
            with contextlib.suppress(ApiError):
                self.request(
                    "POST",
                    f"/api/v1/namespaces/{namespace}/serviceaccounts",
                    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
                )
        self.wait_for(lambda: self._get_or_none(path) is not None, timeout, f"ServiceAccount {namespace}/default")

    # ----------------------------------------------------------------- API access

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json", timeout: float = 30.0
    ) -> Any:
        """One raw apiserver request as admin; returns the decoded JSON (None when empty).

        Why not kubectl: polling with a subprocess per probe is slow; this is
        a plain HTTPS call with the admin client certificate. Raises `ApiError`
        on HTTP status >= 400.
        """
        if self._ssl is None:
            raise ControlPlaneError("control plane not started")
        payload = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json", **self._auth_headers()}
        if payload is not None:
            headers["Content-Type"] = content_type
        host, port = self._endpoint()
        conn = http.client.HTTPSConnection(host, port, context=self._ssl, timeout=timeout)
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status >= 400:
            raise ApiError(response.status, method, path, data.decode("utf-8", "replace"))
        return json.loads(data) if data else None

    def _endpoint(self) -> tuple[str, int]:
        return "127.0.0.1", self.ports.apiserver

    def _auth_headers(self) -> dict[str, str]:
        return {}  # the admin client certificate is in the SSL context

    def _get_or_none(self, path: str) -> Any:
        try:
            return self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0) -> str:
        """Run the pinned kubectl as admin against this control plane; return stdout.

        Raises `KubectlError` carrying stderr when it exits non-zero, unless
        ``check`` is false (``kubectl auth can-i`` exits 1 for "no").
        """
        argv = [
            str(self.binaries.kubectl),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise KubectlError(args, proc.returncode, proc.stdout, proc.stderr)
        return proc.stdout

    def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float,
        what: str,
        *,
        interval: float = 0.1,
        ignore: tuple[type[BaseException], ...] = (),
    ) -> T:
        """`wait_for` that also fails at once, with the log tail, when a component dies."""

        def probe() -> T:
            self.ensure_running()
            return predicate()

        return wait_for(probe, timeout, what, interval=interval, ignore=ignore)

    # ----------------------------------------------------------------- objects

    def create_namespace(self, name: str, *, labels: Mapping[str, str] | None = None, timeout: float = 30.0) -> str:
        """Create a namespace and wait for its `default` ServiceAccount; return the name.

        Why wait: the ServiceAccount admission plugin rejects every pod in a
        namespace until that ServiceAccount exists.
        """
        metadata: dict[str, Any] = {"name": name}
        if labels:
            metadata["labels"] = dict(labels)
        self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
        self._ensure_default_service_account(name, timeout)
        return name

    def add_kwok_node(
        self,
        name: str,
        *,
        cpu: str = "4",
        memory: str = "8Gi",
        pods: int = 110,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] | None = None,
        annotations: Mapping[str, str] | None = None,
        extra_resources: Mapping[str, str] | None = None,
        wait: bool = True,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """Create a fake Node that kwok manages and (by default) wait until it is schedulable.

        The node carries kwok's annotation but not kwok's usual
        ``kwok.x-k8s.io/node=fake:NoSchedule`` taint: usher should see ordinary
        nodes. Capacity = allocatable = cpu/memory/pods (+ 100Gi
        ephemeral-storage, + ``extra_resources``, e.g. extended resources).
        Labels default to what a kubelet sets (hostname, os, arch).
        ``taints`` are dicts like ``{"key": k, "value": v, "effect": "NoSchedule"}``.
        "Schedulable" means Ready and without the not-ready taint that
        admission adds to new nodes. Returns the node as last read.
        """
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
        resources.update(extra_resources or {})
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        }
        node_labels.update(labels or {})
        node_annotations = {"node.alpha.kubernetes.io/ttl": "0", **(annotations or {})}
        node_annotations[KWOK_NODE_ANNOTATION] = KWOK_NODE_ANNOTATION_VALUE
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels, "annotations": node_annotations},
            "spec": {"taints": [dict(t) for t in taints or ()]},
            # Nodes accept status on create (that is how kubelets register).
            "status": {
                "capacity": resources,
                "allocatable": dict(resources),
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            },
        }
        node: dict[str, Any] = self.request("POST", "/api/v1/nodes", body)
        if wait:
            node = self.wait_for_nodes_ready([name], timeout=timeout)[name]
        return node

    def wait_for_nodes_ready(self, names: Sequence[str], *, timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        """Wait until every named node is Ready and free of the not-ready taint.

        One LIST per poll, so adding many nodes with ``wait=False`` and waiting
        once is cheap. Without kcm's node-lifecycle-controller nobody lifts
        the not-ready taint, so this does it.
        """
        wanted = set(names)
        ready: dict[str, dict[str, Any]] = {}

        def check() -> bool:
            nodes = self.request("GET", "/api/v1/nodes")["items"]
            for node in nodes:
                node_name = node["metadata"]["name"]
                if node_name not in wanted or node_name in ready or not _node_ready(node):
                    continue
                taints = node.get("spec", {}).get("taints") or []
                if any(t.get("key") == NOT_READY_TAINT for t in taints):
                    if not self.node_lifecycle_controller:
                        kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
                        self.request(
                            "PATCH",
                            f"/api/v1/nodes/{node_name}",
                            {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                             "spec": {"taints": kept}},
                            content_type="application/merge-patch+json",
                        )  # fmt: skip
                    continue
                ready[node_name] = node
            return wanted <= ready.keys()

        self.wait_for(
            check, timeout, f"nodes {sorted(wanted - ready.keys())} to be Ready and untainted",
            ignore=(ApiError,),
        )  # fmt: skip
        return ready


def _node_ready(node: Mapping[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# --------------------------------------------------------------------------- entry points


def start(
    workdir: Path | None = None,
    *,
    extra_apiserver_args: Sequence[str] = (),
    kcm: bool = True,
    kwok: bool = True,
    scheduler: bool = False,
    controllers: Sequence[str] = DEFAULT_CONTROLLERS,
    extra_kcm_args: Sequence[str] = (),
    extra_kwok_args: Sequence[str] = (),
    extra_scheduler_args: Sequence[str] = (),
    timeout: float = 120.0,
    binaries: Binaries | None = None,
) -> ControlPlane:
    """Start etcd, kube-apiserver and (by default) kube-controller-manager and kwok; return when all are ready.

    ``workdir`` (created if needed, must not hold a previous control plane)
    defaults to a fresh temporary directory; it is never deleted by this
    module, so logs survive a failure. ``extra_*_args`` are appended after the
    defaults, so they can override them (e.g. ``--max-requests-inflight=0``).
    ``scheduler`` adds a stock kube-scheduler (benchmark baseline; off because
    it would race usher for pods). ``timeout`` bounds each component's wait.
    On any failure everything started is stopped and the error names the
    component and quotes its log.
    """
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="usher-cp-"))
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    ports = free_ports(6)
    plane = ControlPlane(
        workdir=workdir,
        binaries=binaries or Binaries.locate(),
        ports=Ports(*ports),
        kcm_enabled=kcm,
        kwok_enabled=kwok,
        scheduler_enabled=scheduler,
        controllers=tuple(controllers),
    )
    try:
        plane._start(
            extra_apiserver_args=extra_apiserver_args,
            extra_kcm_args=extra_kcm_args,
            extra_kwok_args=extra_kwok_args,
            extra_scheduler_args=extra_scheduler_args,
            timeout=timeout,
        )
    except BaseException:
        plane.stop(grace=3.0)
        raise
    return plane


@contextlib.contextmanager
def running(workdir: Path | None = None, **kwargs: Any) -> Iterator[ControlPlane]:
    """`start` as a context manager that always stops the control plane."""
    plane = start(workdir, **kwargs)
    try:
        yield plane
    finally:
        plane.stop()


def _main(argv: Sequence[str] | None = None) -> int:
    """``python -m e2e.controlplane up``: a control plane for manual poking, until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m e2e.controlplane", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a control plane and block until SIGINT/SIGTERM")
    up.add_argument("--workdir", type=Path, help="work directory (default: a new temporary one)")
    up.add_argument(
        "--apiserver-arg", action="append", default=[], metavar="ARG",
        help="extra kube-apiserver flag, repeatable; use the = form: --apiserver-arg=--max-requests-inflight=0",
    )  # fmt: skip
    up.add_argument("--no-kcm", action="store_true", help="do not start kube-controller-manager")
    up.add_argument("--no-kwok", action="store_true", help="do not start kwok")
    up.add_argument("--scheduler", action="store_true", help="also start the stock kube-scheduler")
    up.add_argument("--nodes", type=int, default=0, help="add this many kwok nodes (kwok-node-N)")
    args = parser.parse_args(argv)

    stop_requested = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    plane = start(
        args.workdir,
        extra_apiserver_args=args.apiserver_arg,
        kcm=not args.no_kcm,
        kwok=not args.no_kwok,
        scheduler=args.scheduler,
    )
    try:
        names = [f"kwok-node-{i}" for i in range(args.nodes)]
        for name in names:
            plane.add_kwok_node(name, wait=False)
        if names:
            plane.wait_for_nodes_ready(names)
        print(f"control plane up in {plane.startup_seconds:.1f} s ({plane.timings})", flush=True)
        print(f"export KUBECONFIG={plane.kubeconfig}")
        print(f"# apiserver {plane.server}; logs in {plane.logs_dir}; Ctrl-C to stop", flush=True)
        while not stop_requested.wait(0.5):
            plane.ensure_running()
    except ComponentError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
        print(f"stopped; logs kept in {plane.logs_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main())


# --------------------------------------------------------------------------- external clusters


@dataclass(frozen=True)
class _ExternalPki:
    ca_crt: Path


@dataclass(eq=False)
class ExternalCluster(ControlPlane):
    """An existing cluster (kind, or any kubeconfig) behind the `ControlPlane` surface the tests use.

    Nothing is started or stopped; ``add_kwok_node`` needs a kwok controller
    running in that cluster with the same annotation selector (e2e/kind.sh
    installs one). Credentials must be embedded in the kubeconfig
    (certificate-authority-data and a client certificate or a token).
    """

    source: Path = Path()
    _server: str = ""
    _token: str = ""

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path, workdir: Path) -> ExternalCluster:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "logs").mkdir(exist_ok=True)
        config = yaml_load(kubeconfig.read_text())
        context_name = config.get("current-context")
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        ca = workdir / "ca.crt"
        ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        context_ssl = ssl.create_default_context(cafile=str(ca))
        if user.get("client-certificate-data"):
            cert, key = workdir / "client.crt", workdir / "client.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            context_ssl.load_cert_chain(str(cert), str(key))
        shutil.copyfile(kubeconfig, workdir / "kubeconfig")
        plane = cls(workdir=workdir, binaries=Binaries.locate(), ports=Ports(0, 0, 0, 0, 0, 0))
        plane.source = kubeconfig
        plane._server = str(cluster["server"])
        plane._token = str(user.get("token") or "")
        plane._ssl = context_ssl
        plane._pki = _ExternalPki(ca)  # type: ignore[assignment]
        return plane

    @property
    def server(self) -> str:
        return self._server

    @property
    def node_lifecycle_controller(self) -> bool:
        return True  # a real cluster lifts the not-ready taint itself

    def is_running(self) -> bool:
        return True

    def ensure_running(self) -> None:
        return None

    def stop(self, grace: float = 10.0) -> None:
        return None

    def _endpoint(self) -> tuple[str, int]:
        url = urllib.parse.urlsplit(self._server)
        return url.hostname or "127.0.0.1", url.port or 443

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}
