"""The kinds usher watches: their API groups, versions, scope and collection paths.

Namespaces are watched only for their labels (InterPodAffinity's namespaceSelector).
PodGroups and Workloads (``WORKLOAD_KINDS``, scheduling.k8s.io/v1beta1, a beta API
off by default in kube-apiserver) and DeviceTaintRules are optional: watched only
when `discovering.discover` finds them served (and their feature is on).
"""

from __future__ import annotations

from collections.abc import Mapping

Kind = tuple[str, str]
"""(API group, plural) of a watched kind; its version is v1 unless `VERSIONS` says otherwise."""

DRA_RESOURCES = ("resourceclaims", "resourceslices", "deviceclasses")
VOLUME_RESOURCES: tuple[Kind, ...] = (
    ("", "persistentvolumeclaims"),
    ("", "persistentvolumes"),
    ("storage.k8s.io", "storageclasses"),
    ("storage.k8s.io", "csinodes"),
    ("storage.k8s.io", "csidrivers"),
    ("storage.k8s.io", "csistoragecapacities"),
)

POD_GROUPS: Kind = ("scheduling.k8s.io", "podgroups")
WORKLOADS: Kind = ("scheduling.k8s.io", "workloads")
WORKLOAD_KINDS: tuple[Kind, ...] = (POD_GROUPS, WORKLOADS)
"""Watched when the API server serves them (`discover`): gang scheduling, and ``usher explain`` for Workloads."""
DEVICE_TAINT_RULES: Kind = ("resource.k8s.io", "devicetaintrules")
"""Watched when DRADeviceTaintRules is on and the API server serves them (resource.k8s.io/v1 since 1.37)."""
OPTIONAL_KINDS: tuple[Kind, ...] = (*WORKLOAD_KINDS, DEVICE_TAINT_RULES)
"""The kinds watched only when `discover` finds them served (and their feature is on)."""
VERSIONS: Mapping[Kind, str] = dict.fromkeys(WORKLOAD_KINDS, "v1beta1")
"""The kinds watched at another version than v1."""

KINDS: tuple[Kind, ...] = (
    ("", "pods"),
    ("", "nodes"),
    ("", "namespaces"),
    ("", "services"),
    ("policy", "poddisruptionbudgets"),
    *(("resource.k8s.io", plural) for plural in DRA_RESOURCES),
    *VOLUME_RESOURCES,
)
"""The kinds always watched."""

CLUSTER_SCOPED: frozenset[Kind] = frozenset(
    {
        ("", "nodes"),
        ("", "namespaces"),
        ("", "persistentvolumes"),
        ("storage.k8s.io", "storageclasses"),
        ("storage.k8s.io", "csinodes"),
        ("storage.k8s.io", "csidrivers"),
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "deviceclasses"),
        DEVICE_TAINT_RULES,
    }
)


def version(group: str, plural: str) -> str:
    return VERSIONS.get((group, plural), "v1")


def api_path(group: str, plural: str) -> str:
    """The collection's path across all namespaces (``/api/v1/pods``, ``/apis/<group>/<version>/<plural>``)."""
    return f"/apis/{group}/{version(group, plural)}/{plural}" if group else f"/api/v1/{plural}"
