"""Fluent builders for API objects as the API server serves them (plain dicts).

make_pod().name("p").req(cpu="500m").obj()
make_node().name("n1").capacity(cpu="4", memory="8Gi", pods=110).obj()
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Self

_uids = itertools.count(1)
_versions = itertools.count(1)


class PodBuilder:
    def __init__(self) -> None:
        n = next(_uids)
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{n}", "namespace": "default", "uid": f"uid-{n}", "resourceVersion": "1"},
            "spec": {"schedulerName": "usher", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"},
        }

    def name(self, name: str) -> Self:
        self._pod["metadata"]["name"] = name
        return self

    def namespace(self, namespace: str) -> Self:
        self._pod["metadata"]["namespace"] = namespace
        return self

    def uid(self, uid: str) -> Self:
        self._pod["metadata"]["uid"] = uid
        return self

    def scheduler(self, name: str) -> Self:
        self._pod["spec"]["schedulerName"] = name
        return self

    def priority(self, value: int) -> Self:
        self._pod["spec"]["priority"] = value
        return self

    def node(self, name: str) -> Self:
        self._pod["spec"]["nodeName"] = name
        return self

    def phase(self, phase: str) -> Self:
        self._pod["status"]["phase"] = phase
        return self

    def req(self, **requests: str) -> Self:
        """Requests of the (first) container; ``ephemeral_storage`` means ``ephemeral-storage``."""
        resources = self._pod["spec"]["containers"][0].setdefault("resources", {})
        resources.setdefault("requests", {}).update({k.replace("_", "-"): v for k, v in requests.items()})
        return self

    def container(self, **requests: str) -> Self:
        self._pod["spec"]["containers"].append(
            {"name": f"c{len(self._pod['spec']['containers'])}", "resources": {"requests": requests}}
        )
        return self

    def init_container(self, *, sidecar: bool = False, **requests: str) -> Self:
        init = {"name": f"init{len(self._pod['spec'].get('initContainers', []))}", "resources": {"requests": requests}}
        if sidecar:
            init["restartPolicy"] = "Always"
        self._pod["spec"].setdefault("initContainers", []).append(init)
        return self

    def overhead(self, **amounts: str) -> Self:
        self._pod["spec"]["overhead"] = amounts
        return self

    def gates(self, *names: str) -> Self:
        self._pod["spec"]["schedulingGates"] = [{"name": n} for n in names]
        return self

    def version(self, version: str | None = None) -> Self:
        self._pod["metadata"]["resourceVersion"] = version or str(next(_versions) + 1000)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


class NodeBuilder:
    def __init__(self) -> None:
        n = next(_uids)
        self._node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{n}", "uid": f"uid-{n}", "labels": {}},
            "spec": {},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }

    def name(self, name: str) -> Self:
        self._node["metadata"]["name"] = name
        return self

    def capacity(self, **amounts: str | int) -> Self:
        self._node["status"]["allocatable"] = {k.replace("_", "-"): str(v) for k, v in amounts.items()}
        return self

    def label(self, key: str, value: str) -> Self:
        self._node["metadata"]["labels"][key] = value
        return self

    def unschedulable(self, value: bool = True) -> Self:
        self._node["spec"]["unschedulable"] = value
        return self

    def condition(self, kind: str, status: str, heartbeat: str) -> Self:
        self._node["status"]["conditions"] = [{"type": kind, "status": status, "lastHeartbeatTime": heartbeat}]
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._node)


def make_pod() -> PodBuilder:
    return PodBuilder()


def make_node() -> NodeBuilder:
    return NodeBuilder()
