"""The objects every test makes, on any cluster: namespaces that accept pods, and kwok nodes that are Ready.

Shared by both `Cluster` implementations through plain functions over an
`AdminClient`; what differs between clusters is passed in: their
``wait_for`` (a local control plane also watches its processes) and which
controllers' jobs nobody else does there (a local control plane may run
without kcm's serviceaccount or node-lifecycle controllers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from e2e.controlplane.access import AdminClient
from e2e.controlplane.errors import ApiError

__all__ = [
    "KWOK_NODE_ANNOTATION",
    "KWOK_NODE_ANNOTATION_VALUE",
    "NOT_READY_TAINT",
    "Waiting",
    "create_kwok_node",
    "create_namespace",
    "ensure_default_service_account",
    "node_ready",
    "wait_for_nodes_ready",
]

T = TypeVar("T")

#: Annotation kwok selects the nodes it manages by (``--manage-nodes-with-annotation-selector``).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
#: Added to every new Node by the TaintNodesByCondition admission plugin and removed by
#: kcm's node-lifecycle-controller once the node is Ready.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


class Waiting(Protocol):
    """A cluster's ``wait_for`` (see `e2e.controlplane.waiting.wait_for` for the contract)."""

    def __call__(
        self,
        predicate: Callable[[], T],
        timeout: float,
        what: str,
        *,
        interval: float = 0.1,
        ignore: tuple[type[BaseException], ...] = (),
    ) -> T: ...


def ensure_default_service_account(
    client: AdminClient, namespace: str, timeout: float, *, wait_for: Waiting, create: bool
) -> None:
    """Wait for the namespace's `default` ServiceAccount, first making it when ``create`` (no
    serviceaccount-controller runs). Why: the ServiceAccount admission plugin rejects every pod in a
    namespace until it exists."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
    if create:
        with contextlib.suppress(ApiError):
            client.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
            )
    wait_for(lambda: client.get_or_none(path) is not None, timeout, f"ServiceAccount {namespace}/default")


def create_namespace(
    client: AdminClient,
    name: str,
    *,
    labels: Mapping[str, str] | None,
    timeout: float,
    wait_for: Waiting,
    create_default_service_account: bool,
) -> str:
    """Create a namespace and wait for its `default` ServiceAccount; return the name."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    client.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
    ensure_default_service_account(client, name, timeout, wait_for=wait_for, create=create_default_service_account)
    return name


def create_kwok_node(
    client: AdminClient,
    name: str,
    *,
    cpu: str,
    memory: str,
    pods: int,
    labels: Mapping[str, str] | None,
    taints: Sequence[Mapping[str, str]] | None,
    annotations: Mapping[str, str] | None,
    extra_resources: Mapping[str, str] | None,
) -> dict[str, Any]:
    """Create a fake Node that kwok manages; see `e2e.controlplane.clusters.Cluster.add_kwok_node`."""
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
    node: dict[str, Any] = client.request("POST", "/api/v1/nodes", body)
    return node


def wait_for_nodes_ready(
    client: AdminClient,
    names: Sequence[str],
    *,
    timeout: float,
    wait_for: Waiting,
    lift_not_ready_taint: bool,
) -> dict[str, dict[str, Any]]:
    """Wait until every named node is Ready and free of the not-ready taint; return them as last read.

    One LIST per poll, so adding many nodes without waiting and waiting once
    is cheap. ``lift_not_ready_taint``: no node-lifecycle-controller runs to
    lift the taint, so this does it.
    """
    wanted = set(names)
    ready: dict[str, dict[str, Any]] = {}

    def check() -> bool:
        nodes = client.request("GET", "/api/v1/nodes")["items"]
        for node in nodes:
            node_name = node["metadata"]["name"]
            if node_name not in wanted or node_name in ready or not node_ready(node):
                continue
            taints = node.get("spec", {}).get("taints") or []
            if any(t.get("key") == NOT_READY_TAINT for t in taints):
                if lift_not_ready_taint:
                    kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
                    client.request(
                        "PATCH",
                        f"/api/v1/nodes/{node_name}",
                        {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                         "spec": {"taints": kept}},
                        content_type="application/merge-patch+json",
                    )  # fmt: skip
                continue
            ready[node_name] = node
        return wanted <= ready.keys()

    wait_for(
        check, timeout, f"nodes {sorted(wanted - ready.keys())} to be Ready and untainted",
        ignore=(ApiError,),
    )  # fmt: skip
    return ready


def node_ready(node: Mapping[str, Any]) -> bool:
    """Whether the node's Ready condition is True."""
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
