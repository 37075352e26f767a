"""Fluent builders for resource.k8s.io/v1 objects as the API server serves them (plain dicts).

make_slice().name("s1").driver("gpu.example.com").node("n1").device("gpu-0", numa=0).obj()
make_claim().name("c").request("gpu", "gpu", count=2).constraint("gpu.example.com/numa").obj()
make_class().name("gpu").selector("model is a100").config("gpu.example.com", {"mode": "fast"}).obj()
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Any, Self

from usher.core.dra.model import Version

DRIVER = "gpu.example.com"

_uids = itertools.count(1)


def _attribute(value: Any) -> dict[str, Any]:
    if isinstance(value, Version):
        return {"version": value.text}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def device(
    name: str,
    *,
    capacity: Mapping[str, str] | None = None,
    node: str | None = None,
    all_nodes: bool = False,
    selector: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
    consumes: Mapping[str, Mapping[str, str]] | None = None,
    **attributes: Any,
) -> dict[str, Any]:
    """A device entry: keyword attributes are bare ids (``numa=0``), ``attrs`` any names (``{"x.io/numa": 0}``),
    ``consumes`` its ``consumesCounters`` (counter set -> counter -> quantity)."""
    entry: dict[str, Any] = {"name": name}
    named = {**attributes, **(attrs or {})}
    if named:
        entry["attributes"] = {k: _attribute(v) for k, v in named.items()}
    if capacity:
        entry["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    if node is not None:
        entry["nodeName"] = node
    if all_nodes:
        entry["allNodes"] = True
    if selector is not None:
        entry["nodeSelector"] = selector
    if consumes:
        entry["consumesCounters"] = [
            {"counterSet": name, "counters": {c: {"value": v} for c, v in counters.items()}}
            for name, counters in consumes.items()
        ]
    entry.update(extra or {})
    return entry


def node_selector(**labels: str) -> dict[str, Any]:
    """A one-term NodeSelector requiring ``label In [value]`` for each label."""
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in labels.items()]}
        ]
    }


class SliceBuilder:
    def __init__(self) -> None:
        n = next(_uids)
        self._slice: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"slice-{n}"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "pool-1", "generation": 1, "resourceSliceCount": 1},
                "devices": [],
            },
        }

    def name(self, name: str) -> Self:
        self._slice["metadata"]["name"] = name
        return self

    def driver(self, driver: str) -> Self:
        self._slice["spec"]["driver"] = driver
        return self

    def pool(self, name: str, *, generation: int = 1, count: int = 1) -> Self:
        self._slice["spec"]["pool"] = {"name": name, "generation": generation, "resourceSliceCount": count}
        return self

    def node(self, name: str) -> Self:
        self._slice["spec"]["nodeName"] = name
        return self

    def all_nodes(self) -> Self:
        self._slice["spec"]["allNodes"] = True
        return self

    def selector(self, selector: Mapping[str, Any]) -> Self:
        self._slice["spec"]["nodeSelector"] = selector
        return self

    def per_device(self) -> Self:
        self._slice["spec"]["perDeviceNodeSelection"] = True
        return self

    def counters(self, name: str, **counters: str) -> Self:
        """A ``sharedCounters`` entry: counter set ``name`` offering ``counter=quantity``."""
        self._slice["spec"].setdefault("sharedCounters", []).append(
            {"name": name, "counters": {c: {"value": v} for c, v in counters.items()}}
        )
        return self

    def device(self, name: str, **kwargs: Any) -> Self:
        self._slice["spec"]["devices"].append(device(name, **kwargs))
        return self

    def raw_device(self, entry: Mapping[str, Any]) -> Self:
        self._slice["spec"]["devices"].append(dict(entry))
        return self

    def devices(self, prefix: str, count: int, **attributes: Any) -> Self:
        for i in range(count):
            self.device(f"{prefix}{i}", **attributes)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._slice)


class ClassBuilder:
    def __init__(self) -> None:
        self._class: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {},
        }

    def name(self, name: str) -> Self:
        self._class["metadata"]["name"] = name
        return self

    def selector(self, expression: str) -> Self:
        self._class["spec"].setdefault("selectors", []).append({"cel": {"expression": expression}})
        return self

    def config(self, driver: str, parameters: Mapping[str, Any]) -> Self:
        self._class["spec"].setdefault("config", []).append(
            {"opaque": {"driver": driver, "parameters": dict(parameters)}}
        )
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._class)


def sub_request(
    name: str,
    class_name: str = "gpu",
    *,
    count: int | None = None,
    mode: str | None = None,
    selectors: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A ``firstAvailable`` entry (or, without ``name``, the body of ``exactly``)."""
    entry: dict[str, Any] = {"deviceClassName": class_name}
    if name:
        entry["name"] = name
    if count is not None:
        entry["count"] = count
    if mode is not None:
        entry["allocationMode"] = mode
    if selectors:
        entry["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return entry


def constraint(attribute: str, *requests: str, distinct: bool = False) -> dict[str, Any]:
    """A ``spec.devices.constraints[]`` entry: ``matchAttribute`` (or ``distinctAttribute``) over ``requests``
    (none: all of the claim's)."""
    entry: dict[str, Any] = {"distinctAttribute" if distinct else "matchAttribute": attribute}
    if requests:
        entry["requests"] = list(requests)
    return entry


class ClaimBuilder:
    def __init__(self) -> None:
        n = next(_uids)
        self._claim: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"claim-{n}", "namespace": "default", "uid": f"claim-uid-{n}", "resourceVersion": "1"},
            "spec": {"devices": {"requests": []}},
        }

    @property
    def _devices(self) -> dict[str, Any]:
        devices: dict[str, Any] = self._claim["spec"]["devices"]
        return devices

    def name(self, name: str) -> Self:
        self._claim["metadata"]["name"] = name
        return self

    def uid(self, uid: str) -> Self:
        self._claim["metadata"]["uid"] = uid
        return self

    def request(
        self,
        name: str,
        class_name: str = "gpu",
        *,
        count: int | None = None,
        mode: str | None = None,
        selectors: tuple[str, ...] = (),
        admin: bool | None = None,
    ) -> Self:
        exactly = sub_request("", class_name, count=count, mode=mode, selectors=selectors)
        if admin is not None:
            exactly["adminAccess"] = admin
        self._devices["requests"].append({"name": name, "exactly": exactly})
        return self

    def first_available(self, name: str, *subs: dict[str, Any]) -> Self:
        self._devices["requests"].append({"name": name, "firstAvailable": list(subs)})
        return self

    def raw_request(self, entry: Mapping[str, Any]) -> Self:
        self._devices["requests"].append(dict(entry))
        return self

    def constraint(self, attribute: str, *requests: str) -> Self:
        entry: dict[str, Any] = {"matchAttribute": attribute}
        if requests:
            entry["requests"] = list(requests)
        self._devices.setdefault("constraints", []).append(entry)
        return self

    def config(self, driver: str, parameters: Mapping[str, Any], *requests: str) -> Self:
        entry: dict[str, Any] = {"opaque": {"driver": driver, "parameters": dict(parameters)}}
        if requests:
            entry["requests"] = list(requests)
        self._devices.setdefault("config", []).append(entry)
        return self

    def allocated(self, *results: Mapping[str, Any]) -> Self:
        self._claim.setdefault("status", {})["allocation"] = {"devices": {"results": [dict(r) for r in results]}}
        return self

    def reserved(self, *uids: str) -> Self:
        self._claim.setdefault("status", {})["reservedFor"] = [
            {"resource": "pods", "name": f"pod-{u}", "uid": u} for u in uids
        ]
        return self

    def deleting(self) -> Self:
        self._claim["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        return self

    def owner(self, uid: str, *, controller: bool = True) -> Self:
        self._claim["metadata"].setdefault("ownerReferences", []).append(
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid, "controller": controller}
        )
        return self

    def finalizer(self, name: str) -> Self:
        self._claim["metadata"].setdefault("finalizers", []).append(name)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._claim)


def make_slice() -> SliceBuilder:
    return SliceBuilder()


def make_class() -> ClassBuilder:
    return ClassBuilder()


def make_claim() -> ClaimBuilder:
    return ClaimBuilder()
