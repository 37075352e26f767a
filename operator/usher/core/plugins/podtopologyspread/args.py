"""PodTopologySpreadArgs: ``defaultConstraints`` and ``defaultingType``, validated as kube-scheduler does. Pure.

kube-scheduler's checks (``ValidatePodTopologySpreadArgs``): defaultingType
is ``System`` (the default) or ``List``, and ``System`` takes no
defaultConstraints; each default constraint has maxSkew > 0, a topologyKey
that is a valid label key, whenUnsatisfiable DoNotSchedule or
ScheduleAnyway, no labelSelector (it is deduced per pod), and no two share
{topologyKey, whenUnsatisfiable}. usher also rejects unknown fields and
checks minDomains (> 0, DoNotSchedule only) and the two inclusion policies
(Honor or Ignore), which the API server checks on a pod's own constraints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from usher.core.framework.args import PluginArgsError, reject_unknown_args
from usher.core.plugins.podtopologyspread.constraints import DO_NOT_SCHEDULE, HONOR, IGNORE, SCHEDULE_ANYWAY

SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"

CONSTRAINT_FIELDS = frozenset(
    {
        "maxSkew",
        "topologyKey",
        "whenUnsatisfiable",
        "labelSelector",
        "minDomains",
        "nodeAffinityPolicy",
        "nodeTaintsPolicy",
        "matchLabelKeys",
    }
)

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class SpreadArgs:
    """PodTopologySpreadArgs of kubescheduler.config.k8s.io/v1."""

    default_constraints: tuple[Mapping[str, Any], ...] = ()
    defaulting_type: str = SYSTEM_DEFAULTING


def valid_label_key(key: str) -> bool:
    """A qualified name: an optional DNS subdomain prefix (<= 253) and '/', then a name of <= 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _constraint(index: int, raw: Any) -> Mapping[str, Any]:
    path = f"defaultConstraints[{index}]"
    if not isinstance(raw, Mapping):
        raise PluginArgsError(path, "must be an object")
    for key in raw:
        if key not in CONSTRAINT_FIELDS:
            raise PluginArgsError(f"{path}.{key}", f"unknown field (known: {', '.join(sorted(CONSTRAINT_FIELDS))})")
    if not _positive_int(raw.get("maxSkew")):
        raise PluginArgsError(f"{path}.maxSkew", f"Invalid value: {raw.get('maxSkew')!r}: not in valid range (0, inf)")
    key = raw.get("topologyKey")
    if not key:
        raise PluginArgsError(f"{path}.topologyKey", "Required value: can not be empty")
    if not isinstance(key, str) or not valid_label_key(key):
        raise PluginArgsError(f"{path}.topologyKey", f"Invalid value: {key!r}: not a valid label key")
    action = raw.get("whenUnsatisfiable")
    if not action:
        raise PluginArgsError(f"{path}.whenUnsatisfiable", "Required value: can not be empty")
    if action not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise PluginArgsError(
            f"{path}.whenUnsatisfiable",
            f'Unsupported value: {action!r}: supported values: "{DO_NOT_SCHEDULE}", "{SCHEDULE_ANYWAY}"',
        )
    if raw.get("labelSelector") is not None:
        raise PluginArgsError(
            f"{path}.labelSelector", "Forbidden: constraint must not define a selector, as they deduced for each pod"
        )
    min_domains = raw.get("minDomains")
    if min_domains is not None:
        if not _positive_int(min_domains):
            raise PluginArgsError(f"{path}.minDomains", f"Invalid value: {min_domains!r}: must be greater than 0")
        if action != DO_NOT_SCHEDULE:
            raise PluginArgsError(
                f"{path}.minDomains",
                f"Invalid value: {min_domains!r}: can only use minDomains if whenUnsatisfiable={DO_NOT_SCHEDULE}",
            )
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        value = raw.get(policy)
        if value is not None and value not in (HONOR, IGNORE):
            raise PluginArgsError(
                f"{path}.{policy}", f'Unsupported value: {value!r}: supported values: "{HONOR}", "{IGNORE}"'
            )
    keys = raw.get("matchLabelKeys")
    if keys is not None and (not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)):
        raise PluginArgsError(f"{path}.matchLabelKeys", "must be a list of strings")
    return dict(raw)


def parse_args(args: Mapping[str, Any]) -> SpreadArgs:
    reject_unknown_args(args, {"defaultConstraints", "defaultingType"})
    raw_constraints = args.get("defaultConstraints")
    if raw_constraints is None:
        raw_constraints = []
    if not isinstance(raw_constraints, list):
        raise PluginArgsError("defaultConstraints", "must be a list")
    defaulting = args.get("defaultingType") or SYSTEM_DEFAULTING
    if defaulting not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
        raise PluginArgsError(
            "defaultingType",
            f'Unsupported value: {defaulting!r}: supported values: "{LIST_DEFAULTING}", "{SYSTEM_DEFAULTING}"',
        )
    if defaulting == SYSTEM_DEFAULTING and raw_constraints:
        raise PluginArgsError(
            "defaultingType", f'Invalid value: "{SYSTEM_DEFAULTING}": when .defaultConstraints are not empty'
        )
    constraints = [_constraint(i, raw) for i, raw in enumerate(raw_constraints)]
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(constraints):
        pair = (c["topologyKey"], c["whenUnsatisfiable"])
        if pair in seen:
            raise PluginArgsError(f"defaultConstraints[{i}]", f'Duplicate value: "{{{pair[0]}, {pair[1]}}}"')
        seen.add(pair)
    return SpreadArgs(tuple(constraints), defaulting)
