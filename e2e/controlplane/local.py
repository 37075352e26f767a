"""A local control plane: etcd, kube-apiserver and (by default) kube-controller-manager and kwok as processes.

Why this exists: usher is a scheduler, so its e2e suite must talk to a real
kube-apiserver (RBAC, admission plugins, the DRA ResourceClaim controller,
real watch semantics), not a fake. The machine has no Docker, so every
component runs as a plain process from the pinned binaries (see
`e2e.controlplane.binaries`). kwok stands in for kubelets: it keeps fake nodes
Ready (node leases) and moves pods bound to them to Running.

Everything of one control plane lives under one work directory and listens on
free loopback ports, so two control planes (two pytest sessions, or a test that
starts a second one) never share a port or a file. `ControlPlane` implements
`e2e.controlplane.clusters.RestartableControlPlane`; `start` and `running`
make one.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from e2e.controlplane import objects, wiring
from e2e.controlplane.access import AdminClient, AdminCredentials, write_kubeconfig
from e2e.controlplane.binaries import Binaries
from e2e.controlplane.clusters import RestartableControlPlane
from e2e.controlplane.errors import ComponentError, ControlPlaneError, WaitTimeoutError
from e2e.controlplane.pki import Pki
from e2e.controlplane.processes import Component, crash, free_ports, http_get, insecure_context, spawn, terminate
from e2e.controlplane.waiting import wait_for
from e2e.controlplane.wiring import DEFAULT_CONTROLLERS, Ports

__all__ = ["ControlPlane", "running", "start"]

T = TypeVar("T")

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


@dataclass(frozen=True)
class _Readiness:
    """How to tell that a component is ready: a description for messages and a probe."""

    what: str
    probe: Callable[[], bool]


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
    _client: AdminClient | None = field(default=None, init=False, repr=False)
    _readiness: dict[str, _Readiness] = field(default_factory=dict, init=False, repr=False)
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
    def admin(self) -> AdminCredentials:
        """The admin's client certificate (group system:masters) and the CA."""
        return self._api.credentials

    @property
    def node_lifecycle_controller(self) -> bool:
        """Whether kcm runs the controller that lifts the not-ready taint off new nodes."""
        return self.kcm_enabled and "node-lifecycle-controller" in self.controllers

    @property
    def serviceaccount_controller(self) -> bool:
        """Whether kcm runs the controller that makes each namespace's `default` ServiceAccount."""
        return self.kcm_enabled and "serviceaccount-controller" in self.controllers

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- processes

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

    def restart(self, name: str, *, grace: float = 10.0, timeout: float = 120.0, kill: bool = False) -> Component:
        """Stop the component (SIGTERM, SIGKILL after ``grace``; ``kill``: SIGKILL at once, as a crash) and
        start it again with the same flags and state (etcd keeps its data directory); return the new one
        once it is ready again. Its log goes on in the same file."""
        old = self.component(name)
        if kill:
            crash(old)
        else:
            terminate([old], grace)
        new = spawn(name, old.argv, self.logs_dir, self.workdir)
        with self._lock:
            self.components = [new if c is old else c for c in self.components]
        self._wait_ready(new, timeout)
        return new

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
                terminate(tier, max(0.5, deadline - time.monotonic()))
        with _LIVE_LOCK:
            _LIVE.discard(self)

    # ----------------------------------------------------------------- the Cluster protocol

    @property
    def _api(self) -> AdminClient:
        if self._client is None:
            raise ControlPlaneError("control plane not started")
        return self._client

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json", timeout: float = 30.0
    ) -> Any:
        """One raw apiserver request as admin; returns the decoded JSON (None when empty).

        Why not kubectl: polling with a subprocess per probe is slow; this is
        a plain HTTPS call with the admin client certificate. Raises `ApiError`
        on HTTP status >= 400.
        """
        return self._api.request(method, path, body, content_type=content_type, timeout=timeout)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0) -> str:
        """Run the pinned kubectl as admin against this control plane; return stdout.

        Raises `KubectlError` carrying stderr when it exits non-zero, unless
        ``check`` is false (``kubectl auth can-i`` exits 1 for "no").
        """
        return self._api.kubectl(*args, stdin=stdin, check=check, timeout=timeout)

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

    def create_namespace(self, name: str, *, labels: Mapping[str, str] | None = None, timeout: float = 30.0) -> str:
        """Create a namespace and wait for its `default` ServiceAccount; return the name.

        Why wait: the ServiceAccount admission plugin rejects every pod in a
        namespace until that ServiceAccount exists (made here when kcm's
        serviceaccount-controller does not run).
        """
        return objects.create_namespace(
            self._api, name, labels=labels, timeout=timeout, wait_for=self.wait_for,
            create_default_service_account=not self.serviceaccount_controller,
        )  # fmt: skip

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

        See `e2e.controlplane.clusters.Cluster.add_kwok_node`.
        """
        node = objects.create_kwok_node(
            self._api, name, cpu=cpu, memory=memory, pods=pods, labels=labels, taints=taints,
            annotations=annotations, extra_resources=extra_resources,
        )  # fmt: skip
        if wait:
            node = self.wait_for_nodes_ready([name], timeout=timeout)[name]
        return node

    def wait_for_nodes_ready(self, names: Sequence[str], *, timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        """Wait until every named node is Ready and free of the not-ready taint.

        One LIST per poll, so adding many nodes with ``wait=False`` and waiting
        once is cheap. Without kcm's node-lifecycle-controller nobody lifts
        the not-ready taint, so this does it.
        """
        return objects.wait_for_nodes_ready(
            self._api, names, timeout=timeout, wait_for=self.wait_for,
            lift_not_ready_taint=not self.node_lifecycle_controller,
        )  # fmt: skip

    # ----------------------------------------------------------------- startup

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

        p = self.ports
        etcd = self._launch(
            "etcd", wiring.etcd_argv(self.binaries, p, self.workdir / "etcd"),
            "etcd /health", lambda: http_get("http", p.etcd_client, "/health")[0] == 200,
        )  # fmt: skip
        # Certificates while etcd boots.
        pki = self._pki = Pki.generate(self.workdir / "pki", kubernetes_service_ip=wiring.KUBERNETES_SERVICE_IP)
        admin_crt, admin_key = pki.client_cert("admin", "usher-e2e-admin", "system:masters")
        credentials = AdminCredentials(self.server, pki.ca_crt, client_certificate=admin_crt, client_key=admin_key)
        credentials.write_kubeconfig(self.kubeconfig)
        self._client = AdminClient(
            credentials, kubeconfig=self.kubeconfig, kubectl=self.binaries.kubectl,
            kubectl_cache=self.workdir / "kubectl-cache",
        )  # fmt: skip
        admin_ssl = credentials.ssl_context()
        mark("certificates")
        self._wait_ready(etcd, timeout)
        mark("etcd")

        apiserver = self._launch(
            "kube-apiserver",
            wiring.apiserver_argv(self.binaries, p, pki, self.workdir / "apiserver", extra_apiserver_args),
            "kube-apiserver /readyz", lambda: http_get("https", p.apiserver, "/readyz", admin_ssl)[0] == 200,
        )  # fmt: skip
        self._wait_ready(apiserver, timeout)
        mark("kube-apiserver")

        # The rest only need the apiserver: start them together, then wait for each.
        insecure = insecure_context()
        started: list[Component] = []
        if self.kcm_enabled:
            kubeconfig = self._component_kubeconfig("kcm", "system:kube-controller-manager")
            argv = wiring.kcm_argv(
                self.binaries, p, pki, kubeconfig, self.workdir / "kcm", self.controllers, extra_kcm_args
            )
            started.append(self._launch(
                "kube-controller-manager", argv,
                "kube-controller-manager /healthz", lambda: http_get("https", p.kcm, "/healthz", insecure)[0] == 200,
            ))  # fmt: skip
        if self.kwok_enabled:
            # kwok patches status of nodes and pods, renews leases and deletes pods: an admin.
            kubeconfig = self._component_kubeconfig("kwok", "kwok-controller", "system:masters")
            config = self.workdir / "kwok" / "kwok.yaml"
            config.write_text(self.binaries.kwok_config())
            started.append(self._launch(
                "kwok", wiring.kwok_argv(self.binaries, p, kubeconfig, config, extra_kwok_args),
                "kwok /healthz", lambda: http_get("http", p.kwok, "/healthz")[0] == 200,
            ))  # fmt: skip
        if self.scheduler_enabled:
            kubeconfig = self._component_kubeconfig("scheduler", "system:kube-scheduler")
            argv = wiring.scheduler_argv(self.binaries, p, kubeconfig, self.workdir / "scheduler", extra_scheduler_args)
            started.append(self._launch(
                "kube-scheduler", argv,
                "kube-scheduler /healthz", lambda: http_get("https", p.scheduler, "/healthz", insecure)[0] == 200,
            ))  # fmt: skip
        for component in started:
            self._wait_ready(component, timeout)
            mark(component.name)

        # The ServiceAccount admission plugin rejects pods in a namespace until its
        # `default` ServiceAccount exists.
        objects.ensure_default_service_account(
            self._api, "default", timeout, wait_for=self.wait_for, create=not self.serviceaccount_controller
        )
        mark("default-serviceaccount")
        self.startup_seconds = round(time.monotonic() - t0, 3)

    def _component_kubeconfig(self, directory: str, common_name: str, organization: str | None = None) -> Path:
        """A client certificate and kubeconfig for one component, at ``<workdir>/<directory>/kubeconfig``."""
        crt, key = self.pki.client_cert(directory, common_name, organization)
        path = self.workdir / directory / "kubeconfig"
        write_kubeconfig(path, server=self.server, ca=self.pki.ca_crt, cert=crt, key=key, user=common_name)
        return path

    def _launch(self, name: str, argv: list[str], what: str, probe: Callable[[], bool]) -> Component:
        """Start one component and remember how to tell it is ready (for `_wait_ready` and `restart`)."""
        component = spawn(name, argv, self.logs_dir, self.workdir)
        with self._lock:
            self.components.append(component)
            self._readiness[name] = _Readiness(what, probe)
        return component

    def _wait_ready(self, component: Component, timeout: float) -> None:
        """Wait for the component's readiness probe while failing fast, with the log tail, if it exits."""
        readiness = self._readiness[component.name]

        def probe() -> bool:
            component.ensure_running()
            return readiness.probe()

        try:
            wait_for(probe, timeout, readiness.what, interval=0.05, ignore=(OSError, http.client.HTTPException))
        except WaitTimeoutError as error:
            raise ComponentError(
                f"{component.name} did not get ready: {error}; last lines of {component.log_path}:\n"
                f"{component.log_tail()}"
            ) from None


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
    plane = ControlPlane(
        workdir=workdir,
        binaries=binaries or Binaries.locate(),
        ports=Ports(*free_ports(6)),
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


#: Static interface check (mypy): a local control plane is a complete `RestartableControlPlane`.
_IMPLEMENTS: type[RestartableControlPlane] = ControlPlane
