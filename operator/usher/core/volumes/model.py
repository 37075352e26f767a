"""Storage objects as the volume plugins see them: claims, volumes, classes, CSI nodes, drivers and
capacities, with the matching rules of component-helpers/storage/volume. Pure.

Each record keeps the API object it came from (``raw``): PreBind writes the
PV or PVC back with a change, preconditioned on its resourceVersion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from usher.core.resources import parse_quantity
from usher.core.selectors import SelectorError, label_selector_matches, node_selector_term_matches

ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
ANN_MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
FILESYSTEM = "Filesystem"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"


class VolumeModelError(ValueError):
    """A storage object the plugins cannot work with; the message names the offending field."""


def _meta(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    return raw.get("metadata") or {}


def _storage(resources: Mapping[str, Any] | None, what: str) -> Decimal:
    """``storage`` of a ResourceList (0 when absent)."""
    value = (resources or {}).get("storage")
    if value is None:
        return Decimal(0)
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise VolumeModelError(f"{what}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim."""

    namespace: str
    name: str
    uid: str
    version: str
    class_name: str
    """``volume.beta.kubernetes.io/storage-class`` first, then ``spec.storageClassName`` ("" for none)."""
    volume_name: str
    phase: str
    annotations: Mapping[str, str]
    access_modes: tuple[str, ...]
    volume_mode: str
    request: Decimal
    selector: Mapping[str, Any] | None
    attributes_class: str
    deleting: bool
    controller_uid: str
    """The UID of the object controlling this claim (a pod, for a generic ephemeral volume)."""
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fully_bound(self) -> bool:
        """Bound to a PV and the PV controller finished binding it (``bind-completed``)."""
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations

    @property
    def selected_node(self) -> str | None:
        return self.annotations.get(ANN_SELECTED_NODE)


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume."""

    name: str
    version: str
    class_name: str
    phase: str
    capacity: Decimal
    access_modes: tuple[str, ...]
    volume_mode: str
    attributes_class: str
    claim_ref: Mapping[str, Any] | None
    node_affinity: tuple[Mapping[str, Any], ...] | None
    """``spec.nodeAffinity.required.nodeSelectorTerms`` (None: no constraint)."""
    labels: Mapping[str, str]
    csi_driver: str
    """``spec.csi.driver`` ("" for an in-tree volume)."""
    deleting: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    def bound_to(self, claim: Claim) -> bool:
        """component-helpers' IsVolumeBoundToClaim."""
        ref = self.claim_ref
        if not ref or ref.get("name") != claim.name or ref.get("namespace") != claim.namespace:
            return False
        uid = ref.get("uid") or ""
        return not uid or uid == claim.uid

    def fits_node(self, node_labels: Mapping[str, str]) -> bool:
        """component-helpers' CheckNodeAffinity: terms matched against the labels only (no node name,
        so a ``matchFields`` term never matches, as upstream)."""
        if self.node_affinity is None:
            return True
        try:
            return any(node_selector_term_matches(term, node_labels, "") for term in self.node_affinity)
        except SelectorError:
            return False


@dataclass(frozen=True, slots=True)
class StorageClass:
    """A StorageClass: who provisions for it, when claims bind, and where it may provision."""

    name: str
    provisioner: str
    binding_mode: str
    allowed_topologies: tuple[Mapping[str, Any], ...]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def delays_binding(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    def allows(self, node_labels: Mapping[str, str]) -> bool:
        """v1helper.MatchTopologySelectorTerms: no terms allow every node; otherwise one term's every
        ``matchLabelExpressions`` entry must hold (key present with one of the values)."""
        if not self.allowed_topologies:
            return True
        for term in self.allowed_topologies:
            expressions = term.get("matchLabelExpressions") or []
            if all(node_labels.get(e.get("key", "")) in (e.get("values") or []) for e in expressions):
                return True
        return False


@dataclass(frozen=True, slots=True)
class CsiNode:
    """A CSINode: per driver, its attach limit (None: no limit) and topology keys."""

    name: str
    limits: Mapping[str, int | None]
    migrated_plugins: frozenset[str]
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    counts: Mapping[str, int] = field(init=False, repr=False, compare=False)
    """``limits`` of the drivers that report a count."""

    def __post_init__(self) -> None:
        counts = {driver: count for driver, count in self.limits.items() if count is not None}
        object.__setattr__(self, "counts", counts)


@dataclass(frozen=True, slots=True)
class CsiDriver:
    """A CSIDriver: whether its volumes need capacity tracking and attaching."""

    name: str
    storage_capacity: bool
    attach_required: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Capacity:
    """A CSIStorageCapacity: how much a class can still provision where its topology selector matches."""

    namespace: str
    name: str
    class_name: str
    node_topology: Mapping[str, Any] | None
    limit: Decimal | None
    """``maximumVolumeSize`` if set, else ``capacity`` (None: unknown, never sufficient)."""
    capacity: Decimal | None
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reachable_from(self, node_labels: Mapping[str, str]) -> bool:
        if self.node_topology is None:
            return False
        try:
            return label_selector_matches(self.node_topology, node_labels)
        except SelectorError:
            return False


def parse_claim(raw: Mapping[str, Any]) -> Claim:
    meta, spec, status = _meta(raw), raw.get("spec") or {}, raw.get("status") or {}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    class_name = annotations.get(ANN_BETA_STORAGE_CLASS)
    if class_name is None:
        class_name = str(spec.get("storageClassName") or "")
    controller = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    return Claim(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        version=str(meta.get("resourceVersion") or ""),
        class_name=class_name,
        volume_name=str(spec.get("volumeName") or ""),
        phase=str(status.get("phase") or ""),
        annotations=annotations,
        access_modes=tuple(str(m) for m in spec.get("accessModes") or ()),
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        request=_storage((spec.get("resources") or {}).get("requests"), "spec.resources.requests.storage"),
        selector=spec.get("selector"),
        attributes_class=str(spec.get("volumeAttributesClassName") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        controller_uid=str((controller or {}).get("uid") or ""),
        raw=raw,
    )


def parse_volume(raw: Mapping[str, Any]) -> Volume:
    meta, spec, status = _meta(raw), raw.get("spec") or {}, raw.get("status") or {}
    annotations = meta.get("annotations") or {}
    class_name = annotations.get(ANN_BETA_STORAGE_CLASS)
    if class_name is None:
        class_name = spec.get("storageClassName") or ""
    required = (spec.get("nodeAffinity") or {}).get("required")
    return Volume(
        name=str(meta.get("name") or ""),
        version=str(meta.get("resourceVersion") or ""),
        class_name=str(class_name),
        phase=str(status.get("phase") or ""),
        capacity=_storage(spec.get("capacity"), "spec.capacity.storage"),
        access_modes=tuple(str(m) for m in spec.get("accessModes") or ()),
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        attributes_class=str(spec.get("volumeAttributesClassName") or ""),
        claim_ref=spec.get("claimRef"),
        node_affinity=tuple(required.get("nodeSelectorTerms") or ()) if required is not None else None,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        csi_driver=str((spec.get("csi") or {}).get("driver") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        raw=raw,
    )


def parse_class(raw: Mapping[str, Any]) -> StorageClass:
    return StorageClass(
        name=str(_meta(raw).get("name") or ""),
        provisioner=str(raw.get("provisioner") or ""),
        binding_mode=str(raw.get("volumeBindingMode") or "Immediate"),
        allowed_topologies=tuple(raw.get("allowedTopologies") or ()),
        raw=raw,
    )


def parse_csi_node(raw: Mapping[str, Any]) -> CsiNode:
    limits: dict[str, int | None] = {}
    for driver in (raw.get("spec") or {}).get("drivers") or ():
        count = (driver.get("allocatable") or {}).get("count")
        limits[str(driver.get("name") or "")] = int(count) if count is not None else None
    migrated = (_meta(raw).get("annotations") or {}).get(ANN_MIGRATED_PLUGINS) or ""
    return CsiNode(
        name=str(_meta(raw).get("name") or ""),
        limits=limits,
        migrated_plugins=frozenset(p for p in str(migrated).split(",") if p),
        raw=raw,
    )


def parse_csi_driver(raw: Mapping[str, Any]) -> CsiDriver:
    spec = raw.get("spec") or {}
    return CsiDriver(
        name=str(_meta(raw).get("name") or ""),
        storage_capacity=bool(spec.get("storageCapacity")),
        attach_required=spec.get("attachRequired") is not False,
        raw=raw,
    )


def parse_capacity(raw: Mapping[str, Any]) -> Capacity:
    meta = _meta(raw)
    capacity = parse_quantity(raw["capacity"]) if raw.get("capacity") is not None else None
    maximum = parse_quantity(raw["maximumVolumeSize"]) if raw.get("maximumVolumeSize") is not None else None
    return Capacity(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        class_name=str(raw.get("storageClassName") or ""),
        node_topology=raw.get("nodeTopology"),
        limit=maximum if maximum is not None else capacity,
        capacity=capacity,
        raw=raw,
    )


def access_modes_fit(claim: Claim, volume: Volume) -> bool:
    """component-helpers' CheckAccessModes: the volume offers every mode the claim asks for."""
    return set(claim.access_modes) <= set(volume.access_modes)


def find_matching_volume(
    claim: Claim,
    volumes: Iterable[Volume],
    node_labels: Mapping[str, str],
    excluded: Sequence[str] | set[str],
) -> Volume | None:
    """component-helpers' FindMatchingVolume for a delayed-binding claim on a node: the volume
    pre-bound to the claim if it fits the node (None if it does not), else the smallest available
    volume of the claim's class, size, mode, selector and access modes whose node affinity fits."""
    smallest: Volume | None = None
    for volume in volumes:
        if volume.name in excluded:
            continue
        if volume.claim_ref and not volume.bound_to(claim):
            continue
        if volume.capacity < claim.request or volume.volume_mode != claim.volume_mode:
            continue
        if claim.attributes_class != volume.attributes_class or volume.deleting:
            continue
        fits = volume.fits_node(node_labels)
        if volume.bound_to(claim):
            return volume if fits else None
        if volume.phase != "Available" or volume.class_name != claim.class_name or not fits:
            continue
        if claim.selector is not None:
            try:
                if not label_selector_matches(claim.selector, volume.labels):
                    continue
            except SelectorError:
                continue
        if not access_modes_fit(claim, volume):
            continue
        if smallest is None or smallest.capacity > volume.capacity:
            smallest = volume
    return smallest
