"""A real node for the local control plane: kubelet and containerd in a network namespace of their own.

kwok's nodes run nothing; this one runs pods for real, so the chart's Deployment can start usher
as the containers it describes. Started by the harness on request only (`make real-node-e2e`):

- kubelet of the pinned Kubernetes version, containerd 2.x with its runc shim and the CNI plugins
  bridge, host-local and loopback, all built from the Go module proxy by
  ``e2e/build-binaries.sh node``; Debian's runc.
- images without a registry: the pause image (e2e/node/pause) and usher's image, both built by
  ``make image`` and imported with ``ctr images import``; pods use ``imagePullPolicy: IfNotPresent``.
- certificates: kubelet's serving certificate is signed by the control plane's CA, which the
  apiserver checks (``--kubelet-certificate-authority``, see `apiserver_args`); the apiserver's
  client certificate for kubelets comes from a CA of the node's own, which kubelet trusts; kubelet's
  own client certificate (``system:node:<name>``) from the control plane's client CA.
- the network: a namespace the harness makes (``usher-node-<id>``) and a veth pair, one end on the
  host, one in the namespace, with addresses of a /30 of 10.250.0.0/16; pods get addresses of a /24
  of 10.251.0.0/16 on a bridge inside the namespace. The node has no default route, so nothing
  leaves it but to the host's end of the veth. The apiserver listens on the host's loopback only: a
  forwarder (`e2e.node.forward`) listens inside the namespace on the ``kubernetes`` Service's
  address 10.0.0.1:443, an address of the node itself, which is what pods and kubelet dial.
- kubelet's root directory: ``/run/usher-kl-<4 hex>`` (`RealNode.kubelet_root`), not under the work
  directory. DRA drivers' sockets live beneath it (``plugins/<driver>/dra-<pod uid>.sock``), and an
  AF_UNIX path has at most 107 bytes: the DRA e2e specs' longest driver name leaves 18 characters
  for the root. containerd's sockets are there too (it refuses paths over 104 bytes). A lock on the
  directory (`e2e.node.roots.KubeletRoot`) tells a live node's root from one a killed run left
  behind, which the next start unmounts and removes.
- this machine: cgroup v1 with the cgroupfs driver (kubelet's ``failCgroupV1: false``, no QoS
  cgroups, no node allocatable enforcement); containerd's CRI with ``restrict_oom_score_adj``,
  since lowering oom_score_adj needs a capability the machine lacks (without it every sandbox fails
  with "can't get final child's PID from pipe: EOF").

`RealNode.start` brings it up and waits until the Node is Ready; `RealNode.stop` kills every
container, stops containerd and kubelet, deletes the namespace (and with it the veth) and the
cgroups, unmounts what was mounted under the node's directory and kubelet's root, and removes the root.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.controlplane import Component, ControlPlane, cache_dir, read_versions, write_kubeconfig
from e2e.controlplane.processes import spawn, terminate
from e2e.node.roots import KubeletRoot, unmount_under

__all__ = ["KUBERNETES_SERVICE_IP", "RealNode", "apiserver_args", "node_binaries"]

KUBERNETES_SERVICE_IP = "10.0.0.1"
RUNC = "/usr/sbin/runc"
REPO = Path(__file__).resolve().parent.parent.parent
_OPENSSL_CONFIG = "[req]\ndistinguished_name = dn\n[dn]\n"


def _run(*argv: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv, capture_output=True, text=True, check=False, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
    return result


@dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    containerd_dir: Path
    cni_dir: Path

    @property
    def containerd(self) -> Path:
        return self.containerd_dir / "containerd"

    @property
    def ctr(self) -> Path:
        return self.containerd_dir / "ctr"

    def require(self) -> None:
        needed = [self.kubelet, self.containerd, self.ctr, self.containerd_dir / "containerd-shim-runc-v2"]
        needed += [self.cni_dir / name for name in ("bridge", "host-local", "loopback")]
        missing = [str(p) for p in needed if not os.access(p, os.X_OK)]
        if not os.access(RUNC, os.X_OK):
            missing.append(f"{RUNC} (Debian's runc: `make tools`)")
        if missing:
            raise RuntimeError(f"the real node needs {', '.join(missing)}: run `bash e2e/build-binaries.sh node`")


def node_binaries() -> NodeBinaries:
    """Where ``e2e/build-binaries.sh node`` puts kubelet, containerd and the CNI plugins."""
    pins = read_versions()
    root = cache_dir() / "bin"
    return NodeBinaries(
        kubelet=root / pins["KUBERNETES_VERSION"] / "kubelet",
        containerd_dir=root / f"containerd-{pins['CONTAINERD_VERSION']}",
        cni_dir=root / f"cni-plugins-{pins['CNI_PLUGINS_VERSION']}",
    )


def _node_dir(workdir: Path) -> Path:
    return workdir / "real-node"


def apiserver_args(workdir: Path) -> list[str]:
    """Flags for the control plane whose work directory is ``workdir`` (pass them to `controlplane.start`
    as ``extra_apiserver_args``): the apiserver checks kubelets' serving certificates against its own
    CA (``<workdir>/pki/ca.crt``, written before the apiserver starts) and shows kubelets a client
    certificate of the node's CA. Makes that certificate."""
    pki = _node_dir(workdir) / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    (pki / "openssl.cnf").write_text(_OPENSSL_CONFIG)
    _ca(pki, "kubelet-client-ca")
    crt, key = _leaf(
        pki, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
        pki / "kubelet-client-ca.crt", pki / "kubelet-client-ca.key", usage="clientAuth",
    )  # fmt: skip
    return [
        f"--kubelet-certificate-authority={workdir / 'pki' / 'ca.crt'}",
        f"--kubelet-client-certificate={crt}",
        f"--kubelet-client-key={key}",
        "--kubelet-preferred-address-types=InternalIP",
    ]


def _openssl(pki: Path, *args: str) -> None:
    _run("openssl", *args)


def _ca(pki: Path, name: str) -> None:
    key, crt = pki / f"{name}.key", pki / f"{name}.crt"
    _openssl(pki, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    _openssl(
        pki, "req", "-config", str(pki / "openssl.cnf"), "-x509", "-new", "-key", str(key), "-subj", f"/CN={name}",
        "-days", "30", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", "-out", str(crt),
    )  # fmt: skip


def _leaf(
    pki: Path, name: str, subject: str, ca_crt: Path, ca_key: Path, *, usage: str, sans: str | None = None
) -> tuple[Path, Path]:
    key, crt = pki / f"{name}.key", pki / f"{name}.crt"
    _openssl(pki, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    extensions = ["-addext", "basicConstraints=critical,CA:FALSE", "-addext", f"extendedKeyUsage={usage}",
                  "-addext", "keyUsage=critical,digitalSignature,keyEncipherment"]  # fmt: skip
    if sans:
        extensions += ["-addext", f"subjectAltName={sans}"]
    _openssl(
        pki, "req", "-config", str(pki / "openssl.cnf"), "-x509", "-new", "-key", str(key), "-CA", str(ca_crt),
        "-CAkey", str(ca_key), "-set_serial", str(secrets.randbits(63)), "-subj", subject, "-days", "30",
        *extensions, "-out", str(crt),
    )  # fmt: skip
    key.chmod(0o600)
    return crt, key


def _free_subnet_index() -> int:
    """An index n whose 10.250.n.0/30 and 10.251.n.0/24 no interface or route of this machine uses."""
    used = _run("ip", "-4", "-o", "addr").stdout + _run("ip", "-4", "route").stdout
    for _ in range(100):
        n = secrets.randbelow(250) + 1
        if f"10.250.{n}." not in used and f"10.251.{n}." not in used:
            return n
    raise RuntimeError("no free 10.250.n.0/30 for the real node's veth pair")


@dataclass(eq=False)
class RealNode:
    """A kubelet and containerd in a network namespace of their own, registered with ``control_plane``."""

    control_plane: ControlPlane
    name: str
    workdir: Path
    binaries: NodeBinaries = field(default_factory=node_binaries)
    #: Taints the node registers with (kubelet's registerWithTaints).
    taints: tuple[dict[str, str], ...] = ()
    #: kubelet's featureGates (none: the release's defaults).
    feature_gates: dict[str, bool] = field(default_factory=dict)
    index: int = 0
    components: list[Component] = field(default_factory=list)
    _netns_made: bool = False
    _kubelet_root: KubeletRoot | None = None

    @property
    def netns(self) -> str:
        return f"usher-{self.name}"[:40]

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"

    @property
    def host_ip(self) -> str:
        return f"10.250.{self.index}.1"

    @property
    def node_ip(self) -> str:
        """The node's InternalIP: its end of the veth pair."""
        return f"10.250.{self.index}.2"

    @property
    def pod_cidr(self) -> str:
        return f"10.251.{self.index}.0/24"

    @property
    def containerd_socket(self) -> Path:
        """In kubelet's short root, not the work directory: containerd refuses a socket path over 104 bytes, and
        a harness may nest the node's work directory deep (the DRA conformance runs do)."""
        return self.kubelet_root / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        """kubelet's ``--root-dir``, ``/run/usher-kl-<4 hex>``: the DRA e2e specs' ``--kubelet-root-dir``."""
        if self._kubelet_root is None:
            raise RuntimeError(f"the real node {self.name} has no kubelet root: it is not started")
        return self._kubelet_root.path

    @property
    def logs_dir(self) -> Path:
        return self.control_plane.logs_dir

    @property
    def pod_logs_dir(self) -> Path:
        """kubelet's podLogsDir: ``<namespace>_<pod>_<uid>/<container>/<n>.log``."""
        return self.workdir / "pod-logs"

    def _veth(self) -> tuple[str, str]:
        suffix = self.netns[-8:].replace("-", "")
        return f"uh{suffix}"[:15], f"un{suffix}"[:15]

    # ----------------------------------------------------------------- start

    @classmethod
    def start(
        cls,
        control_plane: ControlPlane,
        *,
        name: str | None = None,
        images: tuple[Path, ...] = (),
        taints: tuple[dict[str, str], ...] = (),
        feature_gates: Mapping[str, bool] | None = None,
    ) -> RealNode:
        """Start the node, import the OCI archives ``images`` into its containerd, and wait until it is Ready.

        ``control_plane`` must have been started with `apiserver_args` of its work directory.
        ``feature_gates`` go into kubelet's configuration as they are.
        """
        node = cls(
            control_plane=control_plane,
            name=name or f"real-node-{secrets.token_hex(3)}",
            workdir=_node_dir(control_plane.workdir),
            taints=taints,
            feature_gates=dict(feature_gates or {}),
        )
        node.binaries.require()
        try:
            node._start(images)
        except BaseException:
            node.stop()
            raise
        return node

    def _start(self, images: tuple[Path, ...]) -> None:
        self._kubelet_root = KubeletRoot.claim()
        for sub in ("containerd", "kubelet", "cni/net.d", "cni/ipam", "pod-logs", "pki"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        self._network()
        self._certificates()
        self._launch(
            "containerd", [str(self.binaries.containerd), "--config", str(self._containerd_config())],
            env={"PATH": f"{self.binaries.containerd_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
        )  # fmt: skip
        self.control_plane.wait_for(
            lambda: self._alive() and self.ctr("version", check=False).returncode == 0,
            60, "containerd to answer on its socket",
        )  # fmt: skip
        for archive in images:
            self.ctr("images", "import", "--no-unpack=false", str(archive), timeout=300)
        self._launch_forwarder()
        self._launch("kubelet", self._kubelet_argv())
        self.control_plane.wait_for(
            lambda: self._alive() and self._ready(), 120, f"the real node {self.name} to be Ready"
        )

    def _network(self) -> None:
        self.index = _free_subnet_index()
        host, inside = self._veth()
        _run("ip", "netns", "add", self.netns)
        self._netns_made = True
        _run("ip", "link", "add", host, "type", "veth", "peer", "name", inside, "netns", self.netns)
        _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", host)
        _run("ip", "link", "set", host, "up")
        # Pods' addresses are reached through the node (the apiserver proxying to a pod, a scraper).
        _run("ip", "route", "add", self.pod_cidr, "via", self.node_ip, "dev", host)
        inns = ("ip", "-n", self.netns)
        _run(*inns, "link", "set", "lo", "up")
        _run(*inns, "addr", "add", f"{self.node_ip}/30", "dev", inside)
        _run(*inns, "link", "set", inside, "up")
        # The kubernetes Service's address is the node's own: the forwarder listens there.
        _run(*inns, "addr", "add", f"{KUBERNETES_SERVICE_IP}/32", "dev", "lo")
        _run("nsenter", f"--net={self.netns_path}", "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")

    def _certificates(self) -> None:
        pki = self.workdir / "pki"
        (pki / "openssl.cnf").write_text(_OPENSSL_CONFIG)
        cp = self.control_plane.pki
        _leaf(pki, "kubelet-serving", f"/CN={self.name}", cp.ca_crt, cp.ca_key, usage="serverAuth",
              sans=f"DNS:{self.name},IP:{self.node_ip}")  # fmt: skip
        crt, key = _leaf(pki, "kubelet-client", f"/O=system:nodes/CN=system:node:{self.name}",
                         cp.client_ca_crt, cp.client_ca_key, usage="clientAuth")  # fmt: skip
        write_kubeconfig(
            self.workdir / "kubelet" / "kubeconfig", server=f"https://{KUBERNETES_SERVICE_IP}:443",
            user=f"system:node:{self.name}", ca=cp.ca_crt, cert=crt, key=key,
        )  # fmt: skip

    def _containerd_config(self) -> Path:
        d = self.workdir / "containerd"
        config = f"""version = 3
root = '{d}/root'
state = '{d}/state'
disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.snapshotter.v1.erofs', 'io.containerd.tracing.processor.v1.otlp']

[grpc]
  address = '{self.containerd_socket}'

[ttrpc]
  address = '{self.containerd_socket}.ttrpc'

[debug]
  address = '{self.kubelet_root}/containerd-debug.sock'

[plugins.'io.containerd.internal.v1.opt']
  path = '{d}/opt'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{_image_names()["pause"]}'

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # Lowering a container's oom_score_adj below containerd's needs CAP_SYS_RESOURCE, absent here.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory, not /var/run/netns: stop() finds them.
  netns_mounts_under_state_dir = true
  # containerd's default, said out loud: the DRA test driver writes its CDI specs into the host's
  # /var/run/cdi (its manifest's hostPath is fixed), and containers get devices from them.
  cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '{RUNC}'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{self.binaries.cni_dir}']
    conf_dir = '{self.workdir}/cni/net.d'

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
"""
        path = d / "config.toml"
        path.write_text(config)
        cni = {
            "cniVersion": "1.0.0",
            "name": "usher-node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "usherbr0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.workdir / "cni" / "ipam"),
                    },
                }
            ],
        }
        (self.workdir / "cni" / "net.d" / "10-usher-node.conflist").write_text(json.dumps(cni, indent=2))
        return path

    def _kubelet_argv(self) -> list[str]:
        pki = self.workdir / "pki"
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine: cgroup v1, no systemd, and no say over the cgroup tree's top.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "cgroupRoot": f"/{self.netns}",
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": self.node_ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "tlsCertFile": str(pki / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki / "kubelet-client-ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "podLogsDir": str(self.pod_logs_dir),
            "resolvConf": "",
            # The machine's disk is shared: never evict for it, nor collect images the node cannot pull back.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "registerNode": True,
            "registerWithTaints": list(self.taints),
            "localStorageCapacityIsolation": False,
        }
        if self.feature_gates:
            config["featureGates"] = dict(self.feature_gates)
        path = self.workdir / "kubelet" / "config.json"
        path.write_text(json.dumps(config, indent=2))
        return [
            str(self.binaries.kubelet),
            f"--config={path}",
            f"--kubeconfig={self.workdir / 'kubelet' / 'kubeconfig'}",
            f"--root-dir={self.kubelet_root}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.node_ip}",
            "--v=2",
        ]

    def _launch(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        component = spawn(
            f"{self.name}-{name}", ["nsenter", f"--net={self.netns_path}", "--", *argv], self.logs_dir,
            self.workdir, env=env,
        )  # fmt: skip
        self.components.append(component)
        return component

    def _launch_forwarder(self) -> None:
        port = self.control_plane.ports.apiserver
        argv = [sys.executable, "-m", "e2e.node.forward", self.netns_path, KUBERNETES_SERVICE_IP, "443", "127.0.0.1",
                str(port)]  # fmt: skip
        component = spawn(f"{self.name}-forward", argv, self.logs_dir, REPO, env={"PYTHONUNBUFFERED": "1"})
        self.components.append(component)
        self.control_plane.wait_for(
            lambda: self._alive() and "forwarding" in component.log_path.read_text(),
            30, "the apiserver forwarder to listen in the node's namespace",
        )  # fmt: skip

    def _alive(self) -> bool:
        """True, or `ComponentError` with the log tail of a component of the node that exited."""
        for component in self.components:
            component.ensure_running()
        return True

    def _ready(self) -> bool:
        node = self.control_plane.request("GET", f"/api/v1/nodes/{self.name}") if self._registered() else None
        if node is None:
            return False
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))

    def _registered(self) -> bool:
        return any(
            n["metadata"]["name"] == self.name for n in self.control_plane.request("GET", "/api/v1/nodes")["items"]
        )

    def ctr(self, *args: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """containerd's ctr against this node, in the CRI's namespace (k8s.io)."""
        return _run(str(self.binaries.ctr), "--address", str(self.containerd_socket), "--namespace", "k8s.io", *args,
                    check=check, timeout=timeout)  # fmt: skip

    def node(self) -> dict[str, Any]:
        """The Node object."""
        return dict(self.control_plane.request("GET", f"/api/v1/nodes/{self.name}"))

    # ----------------------------------------------------------------- stop

    def stop(self) -> None:
        """Stop kubelet, kill every container, stop containerd, and remove the namespace, mounts, cgroups and
        kubelet's root."""
        by_name = {c.name.removeprefix(f"{self.name}-"): c for c in self.components}
        if "kubelet" in by_name:
            terminate([by_name["kubelet"]], 10.0)
        if "containerd" in by_name and by_name["containerd"].alive():
            with contextlib.suppress(Exception):
                for task in self.ctr("tasks", "ls", "--quiet", check=False).stdout.split():
                    self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
        self._kill_shims()
        terminate([c for c in self.components if c.alive()], 10.0)
        self.components = []
        self._kill_cgroups()
        unmount_under(self.workdir)
        if self._kubelet_root is not None:
            self._kubelet_root.release()
            self._kubelet_root = None
        if self._netns_made:
            _run("ip", "netns", "delete", self.netns, check=False)
            self._netns_made = False
        with contextlib.suppress(Exception):
            self.control_plane.request("DELETE", f"/api/v1/nodes/{self.name}")

    def _kill_shims(self) -> None:
        """containerd's shims outlive containerd: kill those of this node (their command line names its socket)."""
        marker = str(self.containerd_socket).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes()
                if b"containerd-shim" in cmdline and marker in cmdline:
                    os.kill(int(proc.name), signal.SIGKILL)

    def _kill_cgroups(self) -> None:
        """Kill what is left in the node's cgroups (its containers) and remove them, leaves first."""
        root = Path("/sys/fs/cgroup")
        for hierarchy in root.iterdir() if root.is_dir() else []:
            top = hierarchy / self.netns
            if not top.is_dir():
                continue
            for _ in range(50):
                procs = [p for f in top.rglob("cgroup.procs") for p in f.read_text().split()]
                if not procs:
                    break
                for pid in procs:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.1)
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def _image_names() -> dict[str, str]:
    from e2e.image import pause_image, usher_image

    return {"pause": pause_image(), "usher": usher_image()}
