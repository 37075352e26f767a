"""Extended resources backed by DeviceClasses (DRAExtendedResource, GA in kube-scheduler v1.37). Pure.

A DeviceClass serves the extended resource its ``spec.extendedResourceName``
names (``example.com/gpu``), and always ``deviceclass.resource.kubernetes.io/
<class name>``. Where two classes name one resource, the newer serves it, and
of two created in the same second the one whose name sorts first.

A pod asking for such a resource (``resources.requests``, as for a device
plugin's) gets it from a node's allocatable where a device plugin publishes it
there, as before. On a node whose allocatable lacks it, NodeResourcesFit leaves
it out and DynamicResources allocates devices of the class instead, through one
ResourceClaim per pod that the scheduler writes at PreBind: a request per
container and resource, named ``container-<i>-request-<j>`` (``i`` counts init
containers first, ``j`` is the resource's place among the container's requests
by name), ExactCount of the container's quantity. An ordinary init container
runs before the others start, so it reuses the devices of the long-lived
containers after it and asks only for what they lack; the init containers
share one request, the largest. The pod's ``status.extendedResourceClaimStatus``
then maps each container and resource to its request: kube-scheduler's
``createRequestsAndMappings``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from usher.core.dra.model import EXACT_COUNT, EXTENDED_CLAIM_ANNOTATION, DeviceClass
from usher.core.resources import QuantityError, parse_quantity

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Every DeviceClass serves ``IMPLICIT_PREFIX + its name``."""
IN_MEMORY_NAME = "<extended-resources>"
"""The name of a pod's extended-resource claim until PreBind creates it (not a valid object name, so it names
no claim in the API; the pod's UID follows it in usher's claim key, so two pods' claims never meet)."""
GENERATED_SUFFIX = "-extended-resources-"
"""The claim's ``metadata.generateName`` is the pod's name and this."""


def is_extended_name(name: str) -> bool:
    """Whether a resource name may be backed by a DeviceClass: an extended resource name (a domain prefix
    outside ``kubernetes.io``, not a quota ``requests.`` name) or an implicit class name."""
    if name.startswith(IMPLICIT_PREFIX):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def served_resources(resources: Iterable[str], class_of: Mapping[str, str]) -> frozenset[str]:
    """Those of ``resources`` a DeviceClass serves (``class_of``: `classes_by_resource`)."""
    if not class_of:
        return frozenset()
    return frozenset(r for r in resources if r in class_of and is_extended_name(r))


def classes_by_resource(classes: Iterable[DeviceClass]) -> dict[str, str]:
    """Resource name -> the name of the DeviceClass that serves it."""
    out: dict[str, str] = {}
    chosen: dict[str, DeviceClass] = {}
    for device_class in classes:
        out[IMPLICIT_PREFIX + device_class.name] = device_class.name
        name = device_class.extended_resource_name
        if not name:
            continue
        other = chosen.get(name)
        if other is None or _serves_before(device_class, other):
            chosen[name] = device_class
    out.update({name: device_class.name for name, device_class in chosen.items()})
    return out


def _serves_before(one: DeviceClass, other: DeviceClass) -> bool:
    """The newer class serves a resource two name; of two created in the same second, the first by name."""
    if one.created != other.created:
        return one.created > other.created
    return one.name < other.name


@dataclass(frozen=True, slots=True)
class ExtendedRequest:
    """One request of a pod's extended-resource claim."""

    name: str
    class_name: str
    count: int


@dataclass(frozen=True, slots=True)
class RequestMapping:
    """One ``status.extendedResourceClaimStatus.requestMappings[]`` entry."""

    container: str
    resource: str
    request: str

    def to_api(self) -> dict[str, str]:
        return {"containerName": self.container, "resourceName": self.resource, "requestName": self.request}


def _container_requests(container: Mapping[str, Any]) -> Mapping[str, Any]:
    """A container's requests as the API server stores them (limits stand in for requests not given)."""
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def _whole(value: Any) -> int:
    """A quantity as a whole number of devices; 0 when it is not one (kube-scheduler's AsInt64 fails then)."""
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return 0
    return int(amount) if amount == amount.to_integral_value() and amount <= Decimal(2**63 - 1) else 0


def _container_request(
    index: int,
    container: Mapping[str, Any],
    resource: str,
    class_name: str,
    reusable: Sequence[ExtendedRequest | None],
) -> tuple[ExtendedRequest | None, list[RequestMapping]]:
    """The request container ``index`` adds for ``resource`` (None: it needs none of its own) and its mappings.

    ``reusable``: requests of long-lived containers the container may use first (None where a container made
    none), as kube-scheduler's createResourceRequestAndMappings.
    """
    requests = _container_requests(container)
    if resource not in requests:
        return None, []
    wanted = _whole(requests[resource])
    if wanted == 0:
        return None, []
    name = str(container.get("name", ""))
    mappings: list[RequestMapping] = []
    covered = 0
    for request in reusable:
        if request is None:
            continue
        covered += request.count
        mappings.append(RequestMapping(name, resource, request.name))
        if covered >= wanted:
            return None, mappings
    own = f"container-{index}-request-{sorted(requests).index(resource)}"
    mappings.append(RequestMapping(name, resource, own))
    return ExtendedRequest(own, class_name, wanted - covered), mappings


def extended_requests(
    pod: Mapping[str, Any], resources: Iterable[str], class_of: Mapping[str, str]
) -> tuple[list[ExtendedRequest], list[RequestMapping]]:
    """The requests of the pod's extended-resource claim for ``resources`` (those this node leaves to DRA),
    sorted by name, and the pod's request mappings."""
    spec = pod.get("spec") or {}
    init = list(spec.get("initContainers") or [])
    containers = [*init, *(spec.get("containers") or [])]
    short_lived = [i for i in range(len(init)) if containers[i].get("restartPolicy") != "Always"]
    long_lived = [i for i in range(len(containers)) if i not in short_lived]
    requests: list[ExtendedRequest] = []
    mappings: list[RequestMapping] = []
    for resource in sorted(resources):
        class_name = class_of.get(resource)
        if class_name is None:
            continue
        long_requests: list[ExtendedRequest | None] = [None] * len(containers)
        long_mappings: list[RequestMapping] = []
        for i in long_lived:
            long_requests[i], made = _container_request(i, containers[i], resource, class_name, ())
            long_mappings += made
        largest: ExtendedRequest | None = None
        short_names: set[str] = set()
        short_mappings: list[RequestMapping] = []
        for i in short_lived:
            request, made = _container_request(i, containers[i], resource, class_name, long_requests[i:])
            if request is not None:
                short_names.add(request.name)
                if largest is None or largest.count < request.count:
                    largest = request
            short_mappings += made
        if largest is not None:
            # The init containers run one at a time: they share the largest one's devices.
            short_mappings = [
                RequestMapping(m.container, m.resource, largest.name) if m.request in short_names else m
                for m in short_mappings
            ]
            requests.append(largest)
        requests += [request for request in long_requests if request is not None]
        mappings += long_mappings + short_mappings
    requests.sort(key=lambda request: request.name)
    return requests, mappings


def in_memory_name(pod_uid: str) -> str:
    """The name usher keys a pod's extended-resource claim by until it is created."""
    return f"{IN_MEMORY_NAME}{pod_uid}"


def claim_object(pod: Mapping[str, Any], requests: Sequence[ExtendedRequest]) -> dict[str, Any]:
    """The pod's extended-resource claim as PreBind creates it (the name and UID come from the API server); in
    memory until then, named `in_memory_name` with the pod's UID as its own."""
    meta = pod.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": meta.get("namespace"),
            "name": in_memory_name(uid),
            "uid": f"extended-resources-{uid}",
            "generateName": f"{meta.get('name')}{GENERATED_SUFFIX}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "uid": uid, "controller": True}
            ],
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": request.name,
                        "exactly": {
                            "deviceClassName": request.class_name,
                            "allocationMode": EXACT_COUNT,
                            "count": request.count,
                        },
                    }
                    for request in requests
                ]
            }
        },
    }
