"""A claim's ``status.allocation`` from the devices the allocator picked. Pure.

As kube-scheduler builds it:

- results in the order the devices were picked, ``adminAccess: true`` only
  where asked, and the request's ``tolerations`` where it has some (DRADeviceTaints);
  a share of a device (``allowMultipleAllocations``) gets a ``shareID`` and its
  ``consumedCapacity`` (DRAConsumableCapacity). kube draws the share ID at random;
  here it is a UUID derived from the claim's UID, the result's position and the
  device, so the core stays pure and a claim's shares never collide;
- configs: each class's ``spec.config`` once (FromClass), naming every request
  that used the class, then the claim's configs (FromClaim) that name no
  request, the request, or the chosen ``req/sub``; a config naming every
  request of the claim drops its list, which the API reads as "all";
- a device's ``bindingConditions`` and ``bindingFailureConditions`` are copied
  into its result (DRADeviceBindingConditions): PreBind waits for them;
- the node selector: a device from a node-local slice (or with its own
  ``nodeName``), or one that ``bindsToNode``, pins the claim to the node it was
  allocated on by ``metadata.name``; otherwise
  the requirements of the devices' node selectors merge into one term; devices
  reachable from every node add nothing, and none at all means no selector.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from usher.core.dra.allocation.pools import Candidate
from usher.core.dra.consumable import Consumed, to_api
from usher.core.dra.model import Claim, DeviceClass, DeviceId, DeviceToleration, Share

_SHARE_IDS = uuid.UUID("6f1c2a63-4c0b-4d5e-9a55-2f0d8e7b9c41")
"""The namespace of usher's share IDs (UUID version 5)."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """One claim's allocation, in API shape."""

    results: tuple[Mapping[str, Any], ...]
    """``{request, driver, pool, device}`` (and ``adminAccess: true``), in the order they were picked."""
    config: tuple[Mapping[str, Any], ...]
    """``{source, requests?, opaque}``: FromClass entries first, then FromClaim; no ``requests`` means all."""
    node_selector: Mapping[str, Any] | None
    """Where the devices are reachable; None when from everywhere."""
    shares: tuple[Share, ...] = ()
    """The results that share a device (with a ``shareID``), and what each takes."""

    def status_allocation(self) -> dict[str, Any]:
        """The ``status.allocation`` object to write (a fresh copy)."""
        devices: dict[str, Any] = {"results": copy.deepcopy(list(self.results))}
        if self.config:
            devices["config"] = copy.deepcopy(list(self.config))
        allocation: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            allocation["nodeSelector"] = copy.deepcopy(dict(self.node_selector))
        return allocation

    def devices(self) -> frozenset[DeviceId]:
        """The devices this allocation takes from others (adminAccess results and shares take none whole)."""
        return frozenset(
            DeviceId(r["driver"], r["pool"], r["device"])
            for r in self.results
            if not r.get("adminAccess") and "shareID" not in r
        )


@dataclass(frozen=True, slots=True)
class ChosenRequest:
    """How one request of the claim was satisfied: its name, the chosen ``req/sub`` name, and the class."""

    base: str
    name: str
    is_sub: bool
    device_class: DeviceClass


@dataclass(frozen=True, slots=True)
class Pick:
    """One device the allocator picked: for which request (``req`` or ``req/sub``), and whether with adminAccess."""

    request: str
    admin_access: bool
    candidate: Candidate
    tolerations: tuple[DeviceToleration, ...] = ()
    """The request's tolerations, which the result records (as kube's allocator writes them)."""
    consumed: Consumed | None = None
    """For a share of a device: what it takes of each capacity (None: the device is the claim's)."""


def build_allocation(
    claim: Claim, chosen: Sequence[ChosenRequest], picks: Sequence[Pick], node_name: str
) -> Allocation:
    results: list[dict[str, Any]] = []
    shares: list[Share] = []
    for index, pick in enumerate(picks):
        device = pick.candidate.id
        result: dict[str, Any] = {
            "request": pick.request,
            "driver": device.driver,
            "pool": device.pool,
            "device": device.device,
        }
        if pick.admin_access:
            result["adminAccess"] = True
        if pick.tolerations:
            result["tolerations"] = [t.to_api() for t in pick.tolerations]
        chosen_device = pick.candidate.device
        if chosen_device.binding_conditions:
            result["bindingConditions"] = list(chosen_device.binding_conditions)
            if chosen_device.binding_failure_conditions:
                result["bindingFailureConditions"] = list(chosen_device.binding_failure_conditions)
        if pick.consumed is not None:
            result["shareID"] = str(uuid.uuid5(_SHARE_IDS, f"{claim.uid}/{index}/{device}"))
            if pick.consumed:
                result["consumedCapacity"] = to_api(pick.consumed)
            shares.append((device, {name: amount.value for name, amount in pick.consumed.items()}))
        results.append(result)
    return Allocation(tuple(results), _configs(claim, chosen), _node_selector(picks, node_name), tuple(shares))


def _names(requests: Sequence[str], request: ChosenRequest) -> bool:
    """Whether a config's request list covers a request: by its name, or by the chosen ``req/sub``."""
    return request.base in requests or (request.is_sub and request.name in requests)


def _configs(claim: Claim, chosen: Sequence[ChosenRequest]) -> tuple[dict[str, Any], ...]:
    configs: list[dict[str, Any]] = []
    class_positions: dict[str, range] = {}
    for request in chosen:
        positions = class_positions.get(request.device_class.name)
        if positions is not None:
            for position in positions:
                configs[position]["requests"].append(request.name)
            continue
        start = len(configs)
        for entry in request.device_class.config:
            configs.append({**entry, "source": "FromClass", "requests": [request.name]})
        class_positions[request.device_class.name] = range(start, len(configs))
    for entry in claim.config:
        requests = list(entry.get("requests") or [])
        if not requests or any(_names(requests, r) for r in chosen):
            configs.append({**entry, "source": "FromClaim", "requests": requests})
    for config in configs:
        if config["requests"] and all(_names(config["requests"], r) for r in chosen):
            config["requests"] = []
        if not config["requests"]:
            del config["requests"]
    return tuple(configs)


def _node_selector(picks: Sequence[Pick], node_name: str) -> dict[str, Any] | None:
    fields: list[Mapping[str, Any]] = []
    expressions: list[Mapping[str, Any]] = []
    for pick in picks:
        slice_ = pick.candidate.slice
        owner = pick.candidate.device if slice_.per_device else slice_
        if owner.node_name is not None or pick.candidate.device.binds_to_node:
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            return {"nodeSelectorTerms": [term]}
        if owner.node_selector is not None:
            only_term = owner.node_selector["nodeSelectorTerms"][0]
            _merge(only_term.get("matchFields") or [], fields)
            _merge(only_term.get("matchExpressions") or [], expressions)
    if not fields and not expressions:
        return None
    merged: dict[str, Any] = {}
    if fields:
        merged["matchFields"] = fields
    if expressions:
        merged["matchExpressions"] = expressions
    return {"nodeSelectorTerms": [merged]}


def _merge(requirements: Sequence[Mapping[str, Any]], into: list[Mapping[str, Any]]) -> None:
    """Add the requirements not already present (same key, operator and set of values)."""
    for requirement in requirements:
        values = set(requirement.get("values") or [])
        if not any(
            r.get("key") == requirement.get("key")
            and r.get("operator") == requirement.get("operator")
            and set(r.get("values") or []) == values
            for r in into
        ):
            into.append(copy.deepcopy(dict(requirement)))
