"""Placement rules against a real API server: every kind of constraint lands pods only where allowed.

Four kwok nodes in two zones, with labels and a taint; one usher; pods with
nodeSelector, node affinity (In, Gt, matchFields), tolerations, host ports,
pod affinity and anti-affinity, and topology spread. Every assertion reads
placements back from the API server.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.test_scheduling import assert_no_node_overcommitted, pod_manifest
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def test_every_kind_of_constraint_lands_pods_only_where_allowed(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    a1 = kwok_nodes("a1", labels={ZONE: "a", "disk": "ssd", "cores": "4"})
    a2 = kwok_nodes(
        "a2", labels={ZONE: "a", "cores": "4"}, taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    )
    b1 = kwok_nodes("b1", labels={ZONE: "b", "cores": "16"})
    b2 = kwok_nodes("b2", labels={ZONE: "b", "disk": "hdd", "cores": "4"})
    nodes = [a1, a2, b1, b2]
    scheduler = usher()
    name = scheduler.scheduler_name
    pods: dict[str, dict[str, Any]] = {}

    def pod(pod_name: str, **spec: Any) -> dict[str, Any]:
        manifest = pod_manifest(pod_name, name, cpu="100m")
        labels = spec.pop("labels", None)
        if labels:
            manifest["metadata"]["labels"] = labels
        manifest["spec"].update(spec)
        pods[pod_name] = manifest
        return manifest

    pod("ssd", nodeSelector={"disk": "ssd"})
    pod(
        "many-cores",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr("cores", "Gt", "8")]}]
                }
            }
        },
    )
    pod(
        "gpu",
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [expr("metadata.name", "In", a2)]}]
                }
            }
        },
    )
    for i in range(4):
        pod(
            f"untolerating-{i}",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [expr(ZONE, "In", "a")]}]
                    }
                }
            },
        )
    for i in range(2):
        manifest = pod(f"port-{i}", nodeSelector={ZONE: "b"})
        manifest["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    for i in range(4):
        pod(
            f"spread-{i}",
            labels={"app": "spread"},
            topologySpreadConstraints=[
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "spread"}},
                }
            ],
        )
    for i in range(3):
        pod(
            f"solo-{i}",
            labels={"app": "solo"},
            affinity={
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "solo"}}, "topologyKey": ZONE}
                    ]
                }
            },
        )
    pod("web", labels={"app": "web"}, nodeSelector={"disk": "hdd"})

    for manifest in pods.values():
        core_api.create_namespaced_pod(namespace, manifest)
    # The follower comes once its leader is bound, so the affinity has something to follow.
    wait_for(lambda: core_api.read_namespaced_pod("web", namespace).spec.node_name, 30, "web bound")
    core_api.create_namespaced_pod(
        namespace,
        pod(
            "follower",
            affinity={
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}
                    ]
                }
            },
        ),
    )

    def placed() -> dict[str, str | None]:
        return {p.metadata.name: p.spec.node_name for p in core_api.list_namespaced_pod(namespace).items}

    def settled() -> bool:
        where = placed()
        solos = [where.get(f"solo-{i}") for i in range(3)]
        return sum(1 for n in where.values() if n) == len(pods) - 1 and solos.count(None) == 1

    wait_for(settled, 60, "every pod bound except the third solo")
    where = placed()
    zone = {a1: "a", a2: "a", b1: "b", b2: "b"}
    assert where["ssd"] == a1, "nodeSelector"
    assert where["many-cores"] == b1, "node affinity Gt"
    assert where["gpu"] == a2, "toleration + matchFields"
    assert all(where[f"untolerating-{i}"] == a1 for i in range(4)), (
        "the tainted node is never used without a toleration"
    )
    assert {where["port-0"], where["port-1"]} == {b1, b2}, "one pod per host port per node"
    assert Counter(zone[where[f"spread-{i}"]] for i in range(4)) == {"a": 2, "b": 2}, "topology spread maxSkew 1"  # type: ignore[index]
    solo_zones = [zone[n] for i in range(3) if (n := where[f"solo-{i}"])]
    assert sorted(solo_zones) == ["a", "b"], "anti-affinity: one per zone, the third waits"
    assert where["web"] == b2
    assert zone[where["follower"]] == "b", "pod affinity follows web's zone"  # type: ignore[index]
    assert_no_node_overcommitted(core_api, nodes)

    waiting = next(f"solo-{i}" for i in range(3) if where[f"solo-{i}"] is None)
    condition = next(
        c for c in core_api.read_namespaced_pod(waiting, namespace).status.conditions if c.type == "PodScheduled"
    )
    assert condition.reason == "Unschedulable"
    assert "node(s) didn't match pod anti-affinity rules" in condition.message
    assert scheduler.metric("scheduler_unschedulable_pods", plugin="InterPodAffinity") == 1


def test_pods_go_to_the_nodes_that_already_have_their_image(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    """ImageLocality: two of three nodes report the pods' 2 GB image in ``status.images`` (as a kubelet does
    once it has pulled it); six pods all go to those two, where LeastAllocated alone would give the empty third
    node some of them."""
    image = f"registry.invalid/big-{namespace[-20:]}:v1"
    nodes = [kwok_nodes(f"img{i}") for i in range(3)]
    with_image = nodes[:2]
    for node in with_image:
        core_api.patch_node_status(node, {"status": {"images": [{"names": [image], "sizeBytes": 2 * 1024**3}]}})
    wait_for(
        lambda: all(core_api.read_node(n).status.images for n in with_image), 30, "the images in the nodes' status"
    )
    scheduler = usher()  # its first list of nodes holds the images
    placed = []
    for i in range(6):
        manifest = pod_manifest(f"pod-{i}", scheduler.scheduler_name, cpu="500m")
        manifest["spec"]["containers"][0]["image"] = image
        core_api.create_namespaced_pod(namespace, manifest)
        node = wait_for(lambda i=i: core_api.read_namespaced_pod(f"pod-{i}", namespace).spec.node_name, 30, "bound")
        placed.append(node)
    assert set(placed) <= set(with_image), f"only nodes with the image: {Counter(placed)}"
    assert all(core_api.read_node(n).status.images for n in with_image), "kwok kept the images reported"
