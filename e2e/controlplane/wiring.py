"""How a local control plane's components are wired together: ports, address ranges and flags.

Pure: each function turns paths and ports into one component's command
line; `e2e.controlplane.local` runs them. Flags a caller passes in
``extra_args`` come last, so they override the defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.controlplane.binaries import Binaries
from e2e.controlplane.objects import KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE
from e2e.controlplane.pki import Pki

__all__ = [
    "DEFAULT_CONTROLLERS",
    "KUBERNETES_SERVICE_IP",
    "NODE_LEASE_SECONDS",
    "POD_CIDR",
    "SERVICE_ACCOUNT_ISSUER",
    "SERVICE_CLUSTER_IP_RANGE",
    "Ports",
    "apiserver_argv",
    "etcd_argv",
    "kcm_argv",
    "kwok_argv",
    "scheduler_argv",
]

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
#: The apiserver's ClusterIP, first address of the service range (kept in the serving cert's SANs).
KUBERNETES_SERVICE_IP = "10.0.0.1"
#: kwok's pod IP range; disjoint from the service range so addresses are unambiguous.
POD_CIDR = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
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
    "device-taint-eviction-controller",  # DRA: evicts pods whose devices got a NoExecute taint they do not tolerate
    "node-lifecycle-controller",  # removes the not-ready taint, watches node leases
    "root-ca-certificate-publisher-controller",  # kube-root-ca.crt ConfigMaps
    "clusterrole-aggregation-controller",  # admin/edit/view roles
    "replicaset-controller",
    "deployment-controller",
    "job-controller",
    "statefulset-controller",  # StatefulSets with volumeClaimTemplates (e2e/test_volumes.py)
    "pod-garbage-collector-controller",  # pods of deleted nodes
    "disruption-controller",  # PodDisruptionBudget status, read by preemption
    # Volumes (e2e/storage.py): binds claims to PVs and hands WaitForFirstConsumer claims to the CSI
    # provisioner once the scheduler picked a node; makes the claims of generic ephemeral volumes;
    # keeps claims and PVs in use from being deleted under a pod.
    "persistentvolume-binder-controller",
    "ephemeral-volume-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
)


@dataclass
class Ports:
    """The loopback ports of one control plane (also written to ``<workdir>/ports.json``)."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    kcm: int
    kwok: int
    scheduler: int


def etcd_argv(binaries: Binaries, ports: Ports, data_dir: Path) -> list[str]:
    return [
        str(binaries.etcd),
        "--name=usher-e2e",
        f"--data-dir={data_dir}",
        f"--listen-client-urls=http://127.0.0.1:{ports.etcd_client}",
        f"--advertise-client-urls=http://127.0.0.1:{ports.etcd_client}",
        f"--listen-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
        f"--initial-cluster=usher-e2e=http://127.0.0.1:{ports.etcd_peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync",  # test data: durability costs time and buys nothing
        # One member elects itself after the first election timeout: 0.1 s, not 1 s (ready in 0.08 s on average
        # here, not 0.5 s). A lone member has no peer to miss heartbeats from, so it never loses the lead.
        "--heartbeat-interval=10",
        "--election-timeout=100",
        "--log-level=warn",
    ]


def apiserver_argv(binaries: Binaries, ports: Ports, pki: Pki, cert_dir: Path, extra_args: Sequence[str]) -> list[str]:
    return [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={cert_dir}",
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
    ]


def kcm_argv(
    binaries: Binaries,
    ports: Ports,
    pki: Pki,
    kubeconfig: Path,
    cert_dir: Path,
    controllers: Sequence[str],
    extra_args: Sequence[str],
) -> list[str]:
    return [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        f"--controllers={','.join(controllers)}",
        # Each controller acts as its own ServiceAccount with the bootstrap
        # RBAC roles, as in kubeadm clusters: RBAC gaps show up here too.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_crt}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.kcm}",
        f"--cert-dir={cert_dir}",
        # Benchmarks create claims and delete pods by the thousand.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        *extra_args,
    ]


def kwok_argv(binaries: Binaries, ports: Ports, kubeconfig: Path, config: Path, extra_args: Sequence[str]) -> list[str]:
    return [
        str(binaries.kwok),
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
        # kwok's own server (healthz, kubelet-like API) doubles as the nodes' kubelet port.
        f"--server-address=127.0.0.1:{ports.kwok}",
        f"--node-port={ports.kwok}",
        "--node-ip=127.0.0.1",
        f"--cidr={POD_CIDR}",
        # Without a lease duration kwok renews no node leases, and the
        # node-lifecycle-controller marks its nodes NotReady after ~50 s.
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
        *extra_args,
    ]


def scheduler_argv(
    binaries: Binaries, ports: Ports, kubeconfig: Path, cert_dir: Path, extra_args: Sequence[str]
) -> list[str]:
    return [
        str(binaries.kube_scheduler),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        f"--cert-dir={cert_dir}",
        *extra_args,
    ]
