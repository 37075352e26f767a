"""ResourceClaims, ResourceSlices and DeviceClasses (resource.k8s.io/v1) as frozen records. Pure.

Each API object is parsed once per watch event into the shape the allocator
works on, and what the allocator relies on is validated here, so the search
never meets a malformed object: a problem raises :class:`ModelError` naming
the field (``spec.devices.requests[0].exactly.count: ...``). The apiserver
defaults are applied as it would: ``allocationMode`` "" means ExactCount and
a ``count`` of 0 (or none) means 1.

Device attributes and capacities are stored by domain, then id, as the CEL
``device`` variable sees them: a bare id in a slice belongs to the driver's
domain, so ``numa`` in a slice of ``gpu.example.com`` is
``attributes["gpu.example.com"]["numa"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any, Literal, NamedTuple, TypeAlias

from usher.core.dra.consumable import Amount, CapacityPolicy, DeviceCapacity
from usher.core.resources import QuantityError, parse_quantity

EXACT_COUNT = "ExactCount"
ALL = "All"
AllocationMode: TypeAlias = Literal["ExactCount", "All"]

SCHEDULING_GROUP = "scheduling.k8s.io"
"""The API group of PodGroups: a claim reserved for, or made for, a PodGroup names it (DRAWorkloadResourceClaims)."""

FINALIZER = "resource.kubernetes.io/delete-protection"
"""The finalizer that keeps an allocated claim until it is deallocated (the scheduler adds it before allocating)."""

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
"""Marks the claim the scheduler makes for a pod's extended resources backed by DeviceClasses (value "true")."""

RESULTS_MAX_SIZE = 32
"""At most this many devices in one claim's ``status.allocation.devices.results`` (the API limit)."""


class ModelError(ValueError):
    """An API object the allocator cannot work with; the message starts with the offending field."""


BLOCKING_EFFECTS = frozenset(("NoSchedule", "NoExecute"))
"""The taint effects that keep a device from being allocated unless tolerated; others (None, and any effect a
newer API adds) are informational, as the allocator ignores them."""


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint on a device, from its ResourceSlice (``spec.devices[].taints``) or a DeviceTaintRule."""

    key: str
    value: str
    effect: str
    time_added: str = ""
    """``timeAdded`` (RFC 3339) as served, or ""."""

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    """A request's ``tolerations[]`` entry: which device taints it accepts."""

    key: str = ""
    operator: str = ""
    """"Equal" (also "", the API's default) or "Exists"; any other operator tolerates nothing."""
    value: str = ""
    effect: str = ""
    """Empty tolerates every effect."""
    toleration_seconds: int | None = None

    def to_api(self) -> dict[str, Any]:
        """The toleration as the API writes it (into an allocation result), empty fields left out."""
        out: dict[str, Any] = {}
        for name, value in (("key", self.key), ("operator", self.operator), ("value", self.value)):
            if value:
                out[name] = value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclass(frozen=True, slots=True)
class Version:
    """A semantic-version attribute value (``{"version": "1.2.3"}``), kept as the text the driver published."""

    text: str


@dataclass(frozen=True, slots=True)
class AttributeList:
    """A list-typed attribute value (DRAListTypeAttributes): ``ints``, ``bools``, ``strings`` or ``versions``.

    Selectors see a CEL list; ``matchAttribute`` wants the devices' values to share an element,
    ``distinctAttribute`` wants them pairwise disjoint (a scalar counts as a list of one)."""

    kind: Literal["int", "bool", "string", "version"]
    values: tuple[int | bool | str, ...]
    """The elements; versions as their text."""
    elements: frozenset[int | bool | str] = field(init=False, repr=False, compare=False)
    """``values`` as a set, built once: constraints intersect it for every device pair the search tries."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "elements", frozenset(self.values))


AttributeValue: TypeAlias = int | bool | str | Version | AttributeList

CounterUse: TypeAlias = tuple[tuple[str, str], int]
"""((counter set, counter), amount): what a partitionable device takes from its pool's shared counters.

Counter amounts are integers in billionths of the quantity (nano units, the finest a Kubernetes quantity
has): exact, and the search adds and compares them in C, not in :class:`~decimal.Decimal`."""


class DeviceId(NamedTuple):
    """A device as allocation results and the in-use set name it.

    A named tuple rather than a frozen dataclass: the allocator checks every device it passes
    against the in-use set, and a tuple hashes and compares in C, a dataclass in Python.
    """

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class Device:
    """One ``spec.devices[]`` entry of a ResourceSlice: what selectors see, and where it is reachable."""

    name: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    """domain -> id -> value."""
    capacity: Mapping[str, Mapping[str, str]]
    """domain -> id -> quantity text (``"80Gi"``)."""
    node_name: str | None = None
    """Per-device node access; only meaningful in a slice with ``perDeviceNodeSelection``."""
    node_selector: Mapping[str, Any] | None = None
    all_nodes: bool = False
    taints: tuple[DeviceTaint, ...] = ()
    """``taints`` as the slice publishes them, then (in the inventory usher allocates from) those of every
    DeviceTaintRule that selects the device (:mod:`usher.core.dra.taints`)."""
    binding_conditions: tuple[str, ...] = ()
    """``bindingConditions`` (DRADeviceBindingConditions): condition types in the claim's ``status.devices`` that
    must all be true before a pod using the device is bound."""
    binding_failure_conditions: tuple[str, ...] = ()
    """``bindingFailureConditions``: a true one fails the binding, and the claim is allocated anew."""
    binds_to_node: bool = False
    """``bindsToNode``: an allocation of the device is pinned to the node it was made for."""
    unsupported_attribute: str = ""
    """The first attribute whose value has no type usher knows: every selector run on the device fails, as CEL
    fails to convert it in kube ("unsupported attribute value")."""
    unselectable: bool = False
    """Never allocated: it needs a feature whose gate is off (binding conditions without DRADeviceBindingConditions);
    set by :class:`~usher.core.dra.state.DraState`."""
    allow_multiple: bool = False
    """``allowMultipleAllocations`` (DRAConsumableCapacity): shared by claims while its capacity lasts."""
    capacities: tuple[DeviceCapacity, ...] = ()
    """``capacity`` with each entry's value and ``requestPolicy``, under the slice's names (for consumable capacity)."""
    capacity_checked: bool = False
    """Whether a request without capacity requests may be refused by the device's capacity: it is shared, has a
    request policy or a negative capacity. Otherwise only a request's ``capacity.requests`` need the check."""
    counters: tuple[CounterUse, ...] = ()
    """``consumesCounters``, flattened (DRAPartitionableDevices): allocated only while the pool's counters last."""
    counter_sets: tuple[str, ...] = ()
    """The counter sets ``consumesCounters`` names (each must exist, even with no counter listed)."""
    consumes_counters: bool = False
    """Whether ``consumesCounters`` has an entry (read for every device the search passes)."""
    compatibility_groups: tuple[tuple[str, frozenset[str]], ...] = ()
    """(counter set, its ``compatibilityGroups``) per ``consumesCounters`` entry (DRADeviceCompatibilityGroups): the
    devices on one counter set are co-allocated only while their groups intersect; no groups only with no groups."""
    declares_groups: bool = False
    """Whether some ``consumesCounters`` entry names a compatibility group."""


@dataclass(frozen=True, slots=True)
class Slice:
    """A ResourceSlice: one driver's devices in one pool, at one generation, and how nodes reach them."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    """``spec.pool.resourceSliceCount``: how many slices the pool has at this generation."""
    node_name: str | None
    node_selector: Mapping[str, Any] | None
    """A NodeSelector with exactly one term."""
    all_nodes: bool
    per_device: bool
    """``perDeviceNodeSelection``: each device says where it is reachable."""
    devices: tuple[Device, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    shared_counters: tuple[tuple[str, Mapping[str, int]], ...] = ()
    """``sharedCounters`` (DRAPartitionableDevices): counter set name -> counter -> amount (nano units), in the
    slice's order."""


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A DeviceClass: the selectors and configuration every request naming it gets."""

    name: str
    selectors: tuple[str, ...]
    """CEL expressions, all of which must be true for a device of this class."""
    config: tuple[Mapping[str, Any], ...]
    """``spec.config[]`` entries (``{opaque: {driver, parameters}}``), copied into allocations."""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    extended_resource_name: str | None = None
    """``spec.extendedResourceName``: pods may ask for this class's devices as that extended resource."""
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339): the newer of two classes naming one resource serves it."""


@dataclass(frozen=True, slots=True)
class SubRequest:
    """An ``exactly`` request (named like its request) or one ``firstAvailable`` entry."""

    name: str
    class_name: str
    selectors: tuple[str, ...]
    mode: AllocationMode
    count: int
    """Devices an ExactCount request needs (at least 1); unused with All."""
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()
    """``tolerations``: the device taints this request accepts (DRADeviceTaints)."""
    capacity: Mapping[str, Amount] | None = None
    """``capacity.requests`` (DRAConsumableCapacity): capacity name -> amount; None without a ``capacity``."""


@dataclass(frozen=True, slots=True)
class Request:
    """One ``spec.devices.requests[]`` entry: exactly one of ``exactly`` and ``first_available`` is set."""

    name: str
    exactly: SubRequest | None
    first_available: tuple[SubRequest, ...] = ()

    @property
    def alternatives(self) -> tuple[SubRequest, ...]:
        """What may satisfy the request: ``exactly`` alone, or the ``firstAvailable`` entries in order."""
        return (self.exactly,) if self.exactly is not None else self.first_available

    def result_name(self, sub: SubRequest) -> str:
        """How results and messages name the request when ``sub`` serves it: ``req``, or ``req/sub``."""
        return self.name if self.exactly is not None else f"{self.name}/{sub.name}"


@dataclass(frozen=True, slots=True)
class Constraint:
    """One ``spec.devices.constraints[]`` entry: an attribute the listed requests' devices share (``matchAttribute``)
    or hold distinct values of (``distinctAttribute``)."""

    requests: tuple[str, ...]
    """Request names (``req`` or ``req/sub``) the constraint applies to; empty means all."""
    attribute: str
    """A fully-qualified attribute name, ``domain/id``."""
    distinct: bool = False
    """A ``distinctAttribute`` (DRAConsumableCapacity): the devices' values of the attribute all differ."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A ResourceClaim as usher needs it: its requests, constraints and configs, and its allocation status."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...]
    config: tuple[Mapping[str, Any], ...]
    """``spec.devices.config[]`` entries (``{requests, opaque}``)."""
    allocation: Mapping[str, Any] | None
    """``status.allocation`` as served, or None while unallocated."""
    reserved_for: tuple[str, ...]
    """UIDs in ``status.reservedFor``."""
    deleting: bool
    owner_uid: str
    """UID of the controller ownerReference (the pod of a template claim), or ""."""
    finalizers: tuple[str, ...]
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    reserved_for_groups: tuple[str, ...] = ()
    """Names of the PodGroups (scheduling.k8s.io ``podgroups``) in ``status.reservedFor``."""
    owner_group: str = ""
    """Name of the controlling PodGroup (a claim made from a PodGroup's template), or ""."""
    extended_for: str = ""
    """The UID of the pod whose extended resources the scheduler made this claim for (annotated
    ``resource.kubernetes.io/extended-resource-claim: "true"``, the pod its controller), or ""."""

    @property
    def key(self) -> str:
        """``namespace/name``, as state and messages name a claim."""
        return f"{self.namespace}/{self.name}"


Share: TypeAlias = tuple[DeviceId, Mapping[str, Decimal]]
"""A device an allocation shares with others (a result with a ``shareID``), and what it takes of each capacity."""


def _results(claim: Claim) -> list[Mapping[str, Any]]:
    if not claim.allocation:
        return []
    return [r for r in (claim.allocation.get("devices") or {}).get("results") or [] if isinstance(r, Mapping)]


def _result_device(result: Mapping[str, Any]) -> DeviceId:
    return DeviceId(str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))


def allocated_devices(claim: Claim, *, shares: bool = True) -> set[DeviceId]:
    """The devices a claim's allocation takes whole: every result except adminAccess ones and, with ``shares``
    (DRAConsumableCapacity), those with a ``shareID``; without it a share takes its device whole, as in kube."""
    return {
        _result_device(r) for r in _results(claim) if not r.get("adminAccess") and not (shares and r.get("shareID"))
    }


def allocated_shares(claim: Claim) -> tuple[Share, ...]:
    """The devices a claim's allocation shares (results with a ``shareID``, not adminAccess), and what each takes.

    A ``consumedCapacity`` amount the API would not have stored counts as nothing taken."""
    shares: list[Share] = []
    for result in _results(claim):
        if result.get("adminAccess") or not result.get("shareID"):
            continue
        consumed: dict[str, Decimal] = {}
        raw = result.get("consumedCapacity")
        for name, amount in (raw if isinstance(raw, Mapping) else {}).items():
            try:
                consumed[str(name)] = _amount(amount, "consumedCapacity").value
            except ModelError:
                continue
        shares.append((_result_device(result), consumed))
    return tuple(shares)


# ---------------------------------------------------------------- parsing helpers


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ModelError(f"{field}: must be an object, got {type(value).__name__}")
    return value


def _list(value: Any, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ModelError(f"{field}: must be a list, got {type(value).__name__}")
    return value


def _string(value: Any, field: str, *, required: bool = True) -> str:
    if value is None or value == "":
        if required:
            raise ModelError(f"{field}: required")
        return ""
    if not isinstance(value, str):
        raise ModelError(f"{field}: must be a string, got {value!r}")
    return value


def _integer(value: Any, field: str, *, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(f"{field}: must be an integer, got {value!r}")
    return value


def _boolean(value: Any, field: str) -> bool:
    if value is not None and not isinstance(value, bool):
        raise ModelError(f"{field}: must be a boolean, got {value!r}")
    return bool(value)


def _names(value: Any, field: str) -> tuple[str, ...]:
    return tuple(_string(v, f"{field}[{i}]") for i, v in enumerate(_list(value, field)))


def _split_name(name: str, driver: str) -> tuple[str, str]:
    """``domain/id`` -> (domain, id); a bare ``id`` belongs to the driver's domain."""
    domain, slash, ident = name.partition("/")
    return (domain, ident) if slash else (driver, name)


def _selectors(raw: Any, field: str) -> tuple[str, ...]:
    expressions: list[str] = []
    for i, selector in enumerate(_list(raw, field)):
        cel = _mapping(_mapping(selector, f"{field}[{i}]").get("cel"), f"{field}[{i}].cel")
        expressions.append(_string(cel.get("expression"), f"{field}[{i}].cel.expression"))
    return tuple(expressions)


def _node_selector(raw: Any, field: str) -> Mapping[str, Any]:
    selector = _mapping(raw, field)
    terms = _list(selector.get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms")
    if len(terms) != 1:
        raise ModelError(f"{field}.nodeSelectorTerms: must have exactly one term, got {len(terms)}")
    return selector


# ---------------------------------------------------------------- taints and tolerations


def parse_taint(raw: Any, field: str) -> DeviceTaint:
    """A ``DeviceTaint``. Any effect is kept: only NoSchedule and NoExecute keep devices from being allocated."""
    taint = _mapping(raw, field)
    return DeviceTaint(
        key=_string(taint.get("key"), f"{field}.key"),
        value=_string(taint.get("value"), f"{field}.value", required=False),
        effect=_string(taint.get("effect"), f"{field}.effect"),
        time_added=_string(taint.get("timeAdded"), f"{field}.timeAdded", required=False),
    )


def _toleration(raw: Any, field: str) -> DeviceToleration:
    entry = _mapping(raw, field)
    seconds = entry.get("tolerationSeconds")
    if seconds is not None:
        seconds = _integer(seconds, f"{field}.tolerationSeconds", default=0)
    return DeviceToleration(
        key=_string(entry.get("key"), f"{field}.key", required=False),
        operator=_string(entry.get("operator"), f"{field}.operator", required=False),
        value=_string(entry.get("value"), f"{field}.value", required=False),
        effect=_string(entry.get("effect"), f"{field}.effect", required=False),
        toleration_seconds=seconds,
    )


# ---------------------------------------------------------------- slices


_LIST_KINDS: Mapping[str, Literal["int", "bool", "string", "version"]] = {
    "ints": "int",
    "bools": "bool",
    "strings": "string",
    "versions": "version",
}


def _attribute(raw: Any, field: str) -> AttributeValue | None:
    """The attribute's value; None for one of no type usher knows (a newer API's), which no selector may read."""
    value = _mapping(raw, field)
    present = [k for k in ("int", "bool", "string", "version", *_LIST_KINDS) if value.get(k) is not None]
    if not present:
        return None
    if len(present) != 1:
        raise ModelError(f"{field}: must set exactly one of int, bool, string, version, got {sorted(value)}")
    kind = present[0]
    item = value[kind]
    if kind in _LIST_KINDS:
        element = _LIST_KINDS[kind]
        items = _list(item, f"{field}.{kind}")
        if not items:
            raise ModelError(f"{field}.{kind}: must not be empty")
        return AttributeList(element, tuple(_scalar(element, v, f"{field}.{kind}[{i}]") for i, v in enumerate(items)))
    scalar = _scalar(kind, item, f"{field}.{kind}")
    return Version(str(scalar)) if kind == "version" else scalar


def _scalar(kind: str, item: Any, field: str) -> int | bool | str:
    """One int, bool, string or version (as its text)."""
    if kind == "int":
        return _integer(item, field, default=0)
    if kind == "bool":
        if not isinstance(item, bool):
            raise ModelError(f"{field}: must be a boolean, got {item!r}")
        return item
    return _string(item, field, required=False)


def _device(raw: Any, field: str, driver: str, per_device: bool) -> Device:
    spec = _mapping(raw, field)
    name = _string(spec.get("name"), f"{field}.name")
    attributes: dict[str, dict[str, AttributeValue]] = {}
    qualified: set[tuple[str, str]] = set()
    unsupported = ""
    for key, value in _mapping(spec.get("attributes"), f"{field}.attributes").items():
        domain, ident = _split_name(key, driver)
        parsed = _attribute(value, f'{field}.attributes["{key}"]')
        if parsed is None:
            unsupported = unsupported or str(key)
            continue
        # The fully-qualified spelling wins over the bare id, as the allocator looks it up first.
        if "/" in key:
            qualified.add((domain, ident))
        elif (domain, ident) in qualified:
            continue
        attributes.setdefault(domain, {})[ident] = parsed
    capacity: dict[str, dict[str, str]] = {}
    capacities: list[DeviceCapacity] = []
    for key, value in _mapping(spec.get("capacity"), f"{field}.capacity").items():
        entry_field = f'{field}.capacity["{key}"]'
        entry = _mapping(value, entry_field)
        amount = entry.get("value")
        if isinstance(amount, bool) or not isinstance(amount, str | int | float):
            raise ModelError(f"{entry_field}.value: must be a quantity, got {amount!r}")
        domain, ident = _split_name(key, driver)
        capacity.setdefault(domain, {})[ident] = str(amount)
        capacities.append(
            DeviceCapacity(
                str(key),
                _amount(amount, f"{entry_field}.value"),
                _policy(entry.get("requestPolicy"), f"{entry_field}.requestPolicy"),
            )
        )
    allow_multiple = _boolean(spec.get("allowMultipleAllocations"), f"{field}.allowMultipleAllocations")
    node_name, node_selector, all_nodes, _ = _node_access(spec, field) if per_device else (None, None, False, False)
    counters: list[CounterUse] = []
    counter_sets: list[str] = []
    groups: list[tuple[str, frozenset[str]]] = []
    for i, use in enumerate(_list(spec.get("consumesCounters"), f"{field}.consumesCounters")):
        use_field = f"{field}.consumesCounters[{i}]"
        entry = _mapping(use, use_field)
        counter_set = _string(entry.get("counterSet"), f"{use_field}.counterSet")
        counter_sets.append(counter_set)
        groups.append(
            (counter_set, frozenset(_names(entry.get("compatibilityGroups"), f"{use_field}.compatibilityGroups")))
        )
        for counter, amount in _counters(entry.get("counters"), f"{use_field}.counters").items():
            counters.append(((counter_set, counter), amount))
    taints = tuple(
        parse_taint(t, f"{field}.taints[{i}]") for i, t in enumerate(_list(spec.get("taints"), f"{field}.taints"))
    )
    return Device(
        name=name,
        attributes=attributes,
        capacity=capacity,
        taints=taints,
        node_name=node_name,
        node_selector=node_selector,
        all_nodes=all_nodes,
        binding_conditions=_names(spec.get("bindingConditions"), f"{field}.bindingConditions"),
        binding_failure_conditions=_names(spec.get("bindingFailureConditions"), f"{field}.bindingFailureConditions"),
        binds_to_node=_boolean(spec.get("bindsToNode"), f"{field}.bindsToNode"),
        allow_multiple=bool(allow_multiple),
        unsupported_attribute=unsupported,
        capacities=tuple(capacities),
        capacity_checked=bool(allow_multiple) or any(c.policy is not None or c.value.value < 0 for c in capacities),
        counters=tuple(counters),
        counter_sets=tuple(counter_sets),
        consumes_counters=bool(counter_sets),
        compatibility_groups=tuple(groups),
        declares_groups=any(names for _, names in groups),
    )


_NANO = Decimal(10) ** 9
_BINARY_UNITS = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def _amount(raw: Any, field: str) -> Amount:
    """A quantity, exactly, and whether it was written in binary units (results write it back that way)."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ModelError(f"{field}: must be a quantity, got {raw!r}")
    try:
        value = parse_quantity(raw)
    except QuantityError as exc:
        raise ModelError(f"{field}: {exc}") from exc
    if not value.is_finite():
        raise ModelError(f"{field}: invalid quantity {raw!r}")
    return Amount(value, isinstance(raw, str) and raw.strip().endswith(_BINARY_UNITS))


def _policy(raw: Any, field: str) -> CapacityPolicy | None:
    """A capacity's ``requestPolicy``, or None."""
    if raw is None:
        return None
    spec = _mapping(raw, field)
    default = None if spec.get("default") is None else _amount(spec["default"], f"{field}.default")
    valid_values = None
    if spec.get("validValues") is not None:
        valid_values = tuple(
            _amount(v, f"{field}.validValues[{i}]")
            for i, v in enumerate(_list(spec["validValues"], f"{field}.validValues"))
        )
    if spec.get("validRange") is None:
        return CapacityPolicy(default=default, valid_values=valid_values)
    bounds = _mapping(spec["validRange"], f"{field}.validRange")
    minimum, maximum, step = (
        None if bounds.get(name) is None else _amount(bounds[name], f"{field}.validRange.{name}")
        for name in ("min", "max", "step")
    )
    if minimum is None:
        raise ModelError(f"{field}.validRange.min: required")
    return CapacityPolicy(
        default=default,
        valid_values=valid_values,
        valid_min=minimum,
        valid_max=maximum,
        valid_step=step,
        has_range=True,
    )


def _counters(raw: Any, field: str) -> dict[str, int]:
    """``counters``: name -> ``{value: quantity}``, as a counter set offers them or a device consumes them;
    amounts in nano units (:data:`CounterUse`), rounded up as the API server rounds quantities."""
    out: dict[str, int] = {}
    for name, counter in _mapping(raw, field).items():
        amount = _amount(_mapping(counter, f"{field}[{name!r}]").get("value"), f"{field}[{name!r}].value").value
        out[str(name)] = int((amount * _NANO).to_integral_value(rounding=ROUND_CEILING))
    return out


def _node_access(
    spec: Mapping[str, Any], field: str, *, slice_level: bool = False
) -> tuple[str | None, Mapping[str, Any] | None, bool, bool]:
    """(nodeName, nodeSelector, allNodes, perDeviceNodeSelection) of a slice or a device: at most one set.

    Only a slice may say perDeviceNodeSelection; its devices then carry the other three.
    """
    node_name = _string(spec.get("nodeName"), f"{field}.nodeName", required=False) or None
    node_selector = None
    if spec.get("nodeSelector") is not None:
        node_selector = _node_selector(spec["nodeSelector"], f"{field}.nodeSelector")
    all_nodes = spec.get("allNodes") is True
    per_device = slice_level and spec.get("perDeviceNodeSelection") is True
    if (node_name is not None) + (node_selector is not None) + all_nodes + per_device > 1:
        fields = "nodeName, nodeSelector, allNodes" + (", perDeviceNodeSelection" if slice_level else "")
        raise ModelError(f"{field}: at most one of {fields} may be set")
    return node_name, node_selector, all_nodes, per_device


def parse_slice(raw: Mapping[str, Any]) -> Slice:
    """A ResourceSlice. A slice with no node access it understands (a future field) is visible nowhere."""
    name = _string(_mapping(raw.get("metadata"), "metadata").get("name"), "metadata.name")
    spec = _mapping(raw.get("spec"), "spec")
    driver = _string(spec.get("driver"), "spec.driver")
    pool = _mapping(spec.get("pool"), "spec.pool")
    pool_name = _string(pool.get("name"), "spec.pool.name")
    generation = _integer(pool.get("generation"), "spec.pool.generation", default=0)
    slice_count = _integer(pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", default=0)
    if slice_count < 1:
        raise ModelError(f"spec.pool.resourceSliceCount: must be at least 1, got {slice_count}")
    node_name, node_selector, all_nodes, per_device = _node_access(spec, "spec", slice_level=True)
    devices = tuple(
        _device(d, f"spec.devices[{i}]", driver, per_device)
        for i, d in enumerate(_list(spec.get("devices"), "spec.devices"))
    )
    shared: list[tuple[str, Mapping[str, int]]] = []
    for i, counter_set in enumerate(_list(spec.get("sharedCounters"), "spec.sharedCounters")):
        entry = _mapping(counter_set, f"spec.sharedCounters[{i}]")
        shared.append(
            (
                _string(entry.get("name"), f"spec.sharedCounters[{i}].name"),
                _counters(entry.get("counters"), f"spec.sharedCounters[{i}].counters"),
            )
        )
    return Slice(
        name=name,
        driver=driver,
        pool=pool_name,
        generation=generation,
        slice_count=slice_count,
        node_name=node_name,
        node_selector=node_selector,
        all_nodes=all_nodes,
        per_device=per_device,
        devices=devices,
        raw=raw,
        shared_counters=tuple(shared),
    )


# ---------------------------------------------------------------- classes


def parse_class(raw: Mapping[str, Any]) -> DeviceClass:
    meta = _mapping(raw.get("metadata"), "metadata")
    name = _string(meta.get("name"), "metadata.name")
    spec = _mapping(raw.get("spec"), "spec")
    config = tuple(_mapping(c, f"spec.config[{i}]") for i, c in enumerate(_list(spec.get("config"), "spec.config")))
    extended = spec.get("extendedResourceName")
    return DeviceClass(
        name=name,
        selectors=_selectors(spec.get("selectors"), "spec.selectors"),
        config=config,
        raw=raw,
        extended_resource_name=None if extended is None else _string(extended, "spec.extendedResourceName"),
        created=_string(meta.get("creationTimestamp"), "metadata.creationTimestamp", required=False),
    )


# ---------------------------------------------------------------- claims


def _sub_request(raw: Mapping[str, Any], field: str, name: str, *, admin: bool) -> SubRequest:
    mode = raw.get("allocationMode") or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise ModelError(f"{field}.allocationMode: unknown mode {mode!r} (want ExactCount or All)")
    count = _integer(raw.get("count"), f"{field}.count", default=0)
    if mode == EXACT_COUNT:
        if count < 0:
            raise ModelError(f"{field}.count: must be at least 1, got {count}")
        count = count or 1
    elif count:
        raise ModelError(f"{field}.count: must not be set with allocationMode All, got {count}")
    admin_access = raw.get("adminAccess") if admin else None
    if admin_access is not None and not isinstance(admin_access, bool):
        raise ModelError(f"{field}.adminAccess: must be a boolean, got {admin_access!r}")
    capacity = None
    if raw.get("capacity") is not None:
        wanted = _mapping(_mapping(raw["capacity"], f"{field}.capacity").get("requests"), f"{field}.capacity.requests")
        capacity = {
            str(name): _amount(amount, f"{field}.capacity.requests[{name!r}]") for name, amount in wanted.items()
        }
    return SubRequest(
        name=name,
        class_name=_string(raw.get("deviceClassName"), f"{field}.deviceClassName"),
        selectors=_selectors(raw.get("selectors"), f"{field}.selectors"),
        mode="All" if mode == ALL else "ExactCount",
        count=count or 1,
        admin_access=bool(admin_access),
        tolerations=tuple(
            _toleration(t, f"{field}.tolerations[{i}]")
            for i, t in enumerate(_list(raw.get("tolerations"), f"{field}.tolerations"))
        ),
        capacity=capacity,
    )


def _request(raw: Any, field: str) -> Request:
    entry = _mapping(raw, field)
    name = _string(entry.get("name"), f"{field}.name")
    exactly = entry.get("exactly")
    first_available = _list(entry.get("firstAvailable"), f"{field}.firstAvailable")
    if (exactly is not None) == bool(first_available):
        raise ModelError(f"{field}: must set exactly one of exactly, firstAvailable")
    if exactly is not None:
        return Request(name, _sub_request(_mapping(exactly, f"{field}.exactly"), f"{field}.exactly", name, admin=True))
    subs: list[SubRequest] = []
    for i, sub in enumerate(first_available):
        sub_field = f"{field}.firstAvailable[{i}]"
        sub_map = _mapping(sub, sub_field)
        subs.append(_sub_request(sub_map, sub_field, _string(sub_map.get("name"), f"{sub_field}.name"), admin=False))
    return Request(name, None, tuple(subs))


def _constraint(raw: Any, field: str) -> Constraint:
    entry = _mapping(raw, field)
    requests = tuple(
        _string(r, f"{field}.requests[{i}]") for i, r in enumerate(_list(entry.get("requests"), f"{field}.requests"))
    )
    kind = "matchAttribute" if entry.get("matchAttribute") is not None else "distinctAttribute"
    if entry.get(kind) is None:
        raise ModelError(f"{field}: empty constraint (want matchAttribute or distinctAttribute)")
    attribute = _string(entry.get(kind), f"{field}.{kind}")
    if "/" not in attribute:
        raise ModelError(f"{field}.{kind}: must be a fully-qualified name (domain/id), got {attribute!r}")
    return Constraint(requests, attribute, distinct=kind == "distinctAttribute")


def parse_claim(raw: Mapping[str, Any]) -> Claim:
    meta = _mapping(raw.get("metadata"), "metadata")
    devices = _mapping(_mapping(raw.get("spec"), "spec").get("devices"), "spec.devices")
    status = _mapping(raw.get("status"), "status")
    requests = tuple(
        _request(r, f"spec.devices.requests[{i}]")
        for i, r in enumerate(_list(devices.get("requests"), "spec.devices.requests"))
    )
    constraints = tuple(
        _constraint(c, f"spec.devices.constraints[{i}]")
        for i, c in enumerate(_list(devices.get("constraints"), "spec.devices.constraints"))
    )
    config = tuple(
        _mapping(c, f"spec.devices.config[{i}]")
        for i, c in enumerate(_list(devices.get("config"), "spec.devices.config"))
    )
    allocation = status.get("allocation")
    if allocation is not None:
        allocation = _mapping(allocation, "status.allocation")
    consumers = [
        _mapping(r, f"status.reservedFor[{i}]")
        for i, r in enumerate(_list(status.get("reservedFor"), "status.reservedFor"))
    ]
    reserved_for = tuple(str(r.get("uid", "")) for r in consumers)
    reserved_for_groups = tuple(
        str(r.get("name", ""))
        for r in consumers
        if r.get("apiGroup") == SCHEDULING_GROUP and r.get("resource") == "podgroups"
    )
    owner_uid = owner_group = extended_for = ""
    for i, ref in enumerate(_list(meta.get("ownerReferences"), "metadata.ownerReferences")):
        if _mapping(ref, f"metadata.ownerReferences[{i}]").get("controller") is True:
            owner_uid = str(ref.get("uid", ""))
            if ref.get("kind") == "PodGroup" and str(ref.get("apiVersion", "")).startswith(SCHEDULING_GROUP + "/"):
                owner_group = str(ref.get("name", ""))
            if ref.get("kind") == "Pod" and (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true":
                extended_for = owner_uid
            break
    return Claim(
        namespace=_string(meta.get("namespace"), "metadata.namespace"),
        name=_string(meta.get("name"), "metadata.name"),
        uid=_string(meta.get("uid"), "metadata.uid", required=False),
        resource_version=_string(meta.get("resourceVersion"), "metadata.resourceVersion", required=False),
        requests=requests,
        constraints=constraints,
        config=config,
        allocation=allocation,
        reserved_for=reserved_for,
        deleting=meta.get("deletionTimestamp") is not None,
        owner_uid=owner_uid,
        reserved_for_groups=reserved_for_groups,
        owner_group=owner_group,
        finalizers=tuple(str(f) for f in _list(meta.get("finalizers"), "metadata.finalizers")),
        raw=raw,
        extended_for=extended_for,
    )
