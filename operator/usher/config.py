"""Configuration: a KubeSchedulerConfiguration subset (``--config``) and feature gates (``--feature-gates``).

Users reuse what they know from kube-scheduler
(``kubescheduler.config.k8s.io/v1``): profiles with their schedulerName,
plugins enabled/disabled per extension point and ``multiPoint``,
``pluginConfig`` args, percentageOfNodesToScore, the pod backoff bounds and
leaderElection. Anything unknown or invalid stops start-up with a
``ConfigError`` whose message names the field (``profiles[0].plugins.score.enabled[1].weight``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from usher.core.framework.args import PluginArgsError
from usher.core.framework.interface import EXTENSION_POINTS, Handle, Plugin, ScorePlugin
from usher.core.framework.runtime import Framework, FrameworkRecorder, PluginSet
from usher.core.plugins import names
from usher.core.plugins.registry import Registry

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"


class ConfigError(ValueError):
    """Invalid configuration; the message starts with the offending field."""


# ---------------------------------------------------------------------- feature gates


@dataclass(frozen=True, slots=True)
class FeatureGate:
    default: bool
    stage: str
    description: str


FEATURE_GATES: dict[str, FeatureGate] = {
    "SchedulerQueueingHints": FeatureGate(True, "GA", "ask QueueingHints whether an event may help a rejected pod"),
    "SchedulerPreQueueingHints": FeatureGate(
        True, "Beta", "let plugins narrow the pods a cluster event is checked against (KEP-6132)"
    ),
    "SchedulerAsyncAPICalls": FeatureGate(True, "Beta", "send API calls through the asynchronous dispatcher"),
    "SchedulerPreEnqueuePodStatus": FeatureGate(
        True, "Alpha", "report PreEnqueue rejections as PodScheduled=False/NotReadyForScheduling (KEP-5501)"
    ),
    "SchedulerPopFromBackoffQ": FeatureGate(True, "Beta", "pop backed-off pods early when activeQ is empty"),
}


@dataclass(frozen=True, slots=True)
class FeatureGates:
    values: Mapping[str, bool]

    def enabled(self, name: str) -> bool:
        return self.values[name]


def parse_feature_gates(text: str | None) -> FeatureGates:
    """``Name=true,Other=false`` -> gates; unknown names and non-boolean values are errors."""
    values = {name: gate.default for name, gate in FEATURE_GATES.items()}
    for raw_item in (text or "").split(","):
        item = raw_item.strip()
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        if name not in FEATURE_GATES:
            raise ConfigError(
                f"--feature-gates: unknown feature gate {name!r} (known: {', '.join(sorted(FEATURE_GATES))})"
            )
        if not sep or raw.strip().lower() not in ("true", "false"):
            raise ConfigError(f"--feature-gates: {name} needs =true or =false, got {item!r}")
        values[name] = raw.strip().lower() == "true"
    if values["SchedulerPreEnqueuePodStatus"] and not values["SchedulerAsyncAPICalls"]:
        raise ConfigError(
            "--feature-gates: SchedulerPreEnqueuePodStatus=true requires SchedulerAsyncAPICalls=true "
            "(the status patches are delayed calls of the asynchronous dispatcher); "
            "disable SchedulerPreEnqueuePodStatus too, or keep SchedulerAsyncAPICalls on"
        )
    return FeatureGates(values)


# ---------------------------------------------------------------------- the configuration


@dataclass(frozen=True, slots=True)
class PluginRef:
    name: str
    weight: int | None = None


@dataclass(frozen=True, slots=True)
class PluginList:
    enabled: tuple[PluginRef, ...] = ()
    disabled: tuple[PluginRef, ...] = ()


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    scheduler_name: str
    plugins: Mapping[str, PluginList] = field(default_factory=dict)
    """``multiPoint`` and the extension point names -> enabled/disabled lists."""
    plugin_config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    percentage_of_nodes_to_score: int | None = None
    path: str = "profiles[0]"


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    leader_elect: bool = False
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_name: str = ""
    resource_namespace: str = ""


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    profiles: tuple[ProfileConfig, ...]
    percentage_of_nodes_to_score: int = 0
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    leader_election: LeaderElectionConfig = LeaderElectionConfig()

    @property
    def scheduler_names(self) -> list[str]:
        return [p.scheduler_name for p in self.profiles]


DEFAULT_PLUGINS: tuple[PluginRef, ...] = (
    PluginRef(names.SCHEDULING_GATES),
    PluginRef(names.PRIORITY_SORT),
    PluginRef(names.NODE_UNSCHEDULABLE),
    PluginRef(names.NODE_NAME),
    PluginRef(names.TAINT_TOLERATION, weight=3),
    PluginRef(names.NODE_AFFINITY, weight=2),
    PluginRef(names.NODE_PORTS),
    PluginRef(names.NODE_RESOURCES_FIT, weight=1),
    PluginRef(names.POD_TOPOLOGY_SPREAD, weight=2),
    PluginRef(names.INTER_POD_AFFINITY, weight=2),
    PluginRef(names.DYNAMIC_RESOURCES),
    PluginRef(names.NODE_RESOURCES_BALANCED_ALLOCATION, weight=1),
    PluginRef(names.DEFAULT_BINDER),
)
"""The default profile's multiPoint list, in kube-scheduler's order."""

_TOP_FIELDS = {
    "apiVersion",
    "kind",
    "profiles",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "leaderElection",
}
_PROFILE_FIELDS = {"schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"}
_PLUGIN_POINTS = {"multiPoint", *EXTENSION_POINTS}
_LEADER_FIELDS = {
    "leaderElect",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "resourceLock",
    "resourceName",
    "resourceNamespace",
}
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def default_config(scheduler_name: str = "usher") -> SchedulerConfig:
    return SchedulerConfig(profiles=(ProfileConfig(scheduler_name=scheduler_name),))


def load_config(path: str | Path, *, registry: Registry) -> SchedulerConfig:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML: {exc}") from exc
    return parse_config(data, registry=registry)


def parse_config(data: Any, *, registry: Registry) -> SchedulerConfig:
    top = _mapping(data, "(top level)")
    _reject_unknown(top, _TOP_FIELDS, "")
    if top.get("apiVersion") != API_VERSION:
        raise ConfigError(f"apiVersion: must be {API_VERSION!r}, got {top.get('apiVersion')!r}")
    if top.get("kind") != KIND:
        raise ConfigError(f"kind: must be {KIND!r}, got {top.get('kind')!r}")
    percentage = _percentage(top.get("percentageOfNodesToScore", 0), "percentageOfNodesToScore")
    initial = _number(top.get("podInitialBackoffSeconds", 1), "podInitialBackoffSeconds", minimum=1)
    maximum = _number(top.get("podMaxBackoffSeconds", 10), "podMaxBackoffSeconds", minimum=1)
    if maximum < initial:
        raise ConfigError(f"podMaxBackoffSeconds: must be >= podInitialBackoffSeconds ({initial:g}), got {maximum:g}")
    raw_profiles = top.get("profiles")
    if raw_profiles is None:
        raw_profiles = [{"schedulerName": "usher"}]
    if not isinstance(raw_profiles, list) or not raw_profiles:
        raise ConfigError("profiles: must be a non-empty list")
    profiles = tuple(_profile(raw, f"profiles[{i}]", registry) for i, raw in enumerate(raw_profiles))
    seen: set[str] = set()
    for profile in profiles:
        if profile.scheduler_name in seen:
            raise ConfigError(f"{profile.path}.schedulerName: duplicate scheduler name {profile.scheduler_name!r}")
        seen.add(profile.scheduler_name)
    return SchedulerConfig(
        profiles=profiles,
        percentage_of_nodes_to_score=percentage if percentage is not None else 0,
        pod_initial_backoff_seconds=initial,
        pod_max_backoff_seconds=maximum,
        leader_election=_leader_election(top.get("leaderElection"), "leaderElection"),
    )


def _profile(raw: Any, path: str, registry: Registry) -> ProfileConfig:
    data = _mapping(raw, path)
    _reject_unknown(data, _PROFILE_FIELDS, path)
    name = data.get("schedulerName")
    if not isinstance(name, str) or not name or len(name) > 63 or not _DNS1123.match(name):
        raise ConfigError(f"{path}.schedulerName: must be a DNS-1123 name, got {name!r}")
    plugins: dict[str, PluginList] = {}
    raw_plugins = _mapping(data.get("plugins") or {}, f"{path}.plugins")
    for point, lists in raw_plugins.items():
        point_path = f"{path}.plugins.{point}"
        if point not in _PLUGIN_POINTS:
            raise ConfigError(f"{point_path}: unknown extension point (known: {', '.join(sorted(_PLUGIN_POINTS))})")
        plugins[point] = _plugin_list(lists, point_path, registry)
    plugin_config: dict[str, Mapping[str, Any]] = {}
    raw_config = data.get("pluginConfig") or []
    if not isinstance(raw_config, list):
        raise ConfigError(f"{path}.pluginConfig: must be a list")
    for i, entry in enumerate(raw_config):
        entry_path = f"{path}.pluginConfig[{i}]"
        entry_map = _mapping(entry, entry_path)
        _reject_unknown(entry_map, {"name", "args"}, entry_path)
        plugin = entry_map.get("name")
        if plugin not in registry:
            raise ConfigError(f"{entry_path}.name: unknown plugin {plugin!r}")
        if plugin in plugin_config:
            raise ConfigError(f"{entry_path}.name: {plugin} configured twice")
        plugin_config[str(plugin)] = _mapping(entry_map.get("args") or {}, f"{entry_path}.args")
    return ProfileConfig(
        scheduler_name=name,
        plugins=plugins,
        plugin_config=plugin_config,
        percentage_of_nodes_to_score=_percentage(
            data.get("percentageOfNodesToScore"), f"{path}.percentageOfNodesToScore"
        ),
        path=path,
    )


def _plugin_list(raw: Any, path: str, registry: Registry) -> PluginList:
    data = _mapping(raw, path)
    _reject_unknown(data, {"enabled", "disabled"}, path)
    result: dict[str, list[PluginRef]] = {"enabled": [], "disabled": []}
    for kind in ("enabled", "disabled"):
        items = data.get(kind) or []
        if not isinstance(items, list):
            raise ConfigError(f"{path}.{kind}: must be a list")
        for i, item in enumerate(items):
            item_path = f"{path}.{kind}[{i}]"
            ref = _mapping(item, item_path)
            _reject_unknown(ref, {"name", "weight"}, item_path)
            name = ref.get("name")
            if not (kind == "disabled" and name == "*") and name not in registry:
                raise ConfigError(f"{item_path}.name: unknown plugin {name!r} (known: {', '.join(sorted(registry))})")
            weight = ref.get("weight")
            if weight is not None and (
                not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100
            ):
                raise ConfigError(f"{item_path}.weight: must be an integer in 1..100, got {weight!r}")
            result[kind].append(PluginRef(str(name), weight))
    return PluginList(tuple(result["enabled"]), tuple(result["disabled"]))


def _leader_election(raw: Any, path: str) -> LeaderElectionConfig:
    if raw is None:
        return LeaderElectionConfig()
    data = _mapping(raw, path)
    _reject_unknown(data, _LEADER_FIELDS, path)
    lock = data.get("resourceLock", "leases")
    if lock != "leases":
        raise ConfigError(f"{path}.resourceLock: only 'leases' is supported, got {lock!r}")
    elect = data.get("leaderElect", False)
    if not isinstance(elect, bool):
        raise ConfigError(f"{path}.leaderElect: must be true or false, got {elect!r}")
    config = LeaderElectionConfig(
        leader_elect=elect,
        lease_duration=_duration(data.get("leaseDuration", "15s"), f"{path}.leaseDuration"),
        renew_deadline=_duration(data.get("renewDeadline", "10s"), f"{path}.renewDeadline"),
        retry_period=_duration(data.get("retryPeriod", "2s"), f"{path}.retryPeriod"),
        resource_name=str(data.get("resourceName") or ""),
        resource_namespace=str(data.get("resourceNamespace") or ""),
    )
    if not config.lease_duration > config.renew_deadline > config.retry_period:
        raise ConfigError(f"{path}: leaseDuration > renewDeadline > retryPeriod must hold")
    return config


# ---------------------------------------------------------------------- building frameworks


def build_framework(
    profile: ProfileConfig,
    *,
    registry: Registry,
    handle: Handle,
    recorder: FrameworkRecorder | None = None,
) -> Framework:
    """Instantiate a profile's plugins and sort them into extension points, kube-scheduler's way.

    ``multiPoint`` enables a plugin at every extension point it implements;
    an extension point's own ``enabled`` list adds to it (and its order wins),
    ``disabled`` removes (``*`` removes the defaults).
    """
    multi = _merge(DEFAULT_PLUGINS, profile.plugins.get("multiPoint", PluginList()))
    instances: dict[str, Plugin] = {}

    def instance(name: str) -> Plugin:
        if name not in instances:
            try:
                instances[name] = registry.factory(name)(profile.plugin_config.get(name, {}), handle)
            except PluginArgsError as exc:
                index = list(profile.plugin_config).index(name)
                raise ConfigError(f"{profile.path}.pluginConfig[{index}].args.{exc}") from exc
        return instances[name]

    plugin_set = PluginSet()
    weights: dict[str, int] = {}
    for point, protocol in EXTENSION_POINTS.items():
        own = profile.plugins.get(point, PluginList())
        disabled = {ref.name for ref in own.disabled}
        chosen: list[PluginRef] = [] if "*" in disabled else [r for r in multi if r.name not in disabled]
        chosen = [r for r in chosen if isinstance(instance(r.name), protocol)]
        for ref in own.enabled:
            plugin = instance(ref.name)
            if not isinstance(plugin, protocol):
                raise ConfigError(f"{profile.path}.plugins.{point}: plugin {ref.name} does not implement {point}")
            chosen = [r for r in chosen if r.name != ref.name] + [ref]
        for ref in chosen:
            if point == "score":
                weights[ref.name] = ref.weight or weights.get(ref.name) or _multi_weight(multi, ref.name)
        _assign(plugin_set, point, [instance(r.name) for r in chosen], weights)
    if plugin_set.queue_sort is None:
        raise ConfigError(f"{profile.path}.plugins.queueSort: a queue sort plugin is required")
    if not plugin_set.bind:
        raise ConfigError(f"{profile.path}.plugins.bind: a bind plugin is required")
    seen: set[str] = set()
    for plugin in instances.values():
        if plugin.name not in seen and _enabled_anywhere(plugin_set, plugin):
            plugin_set.all.append(plugin)
            seen.add(plugin.name)
    return Framework(
        profile.scheduler_name,
        plugin_set,
        percentage_of_nodes_to_score=profile.percentage_of_nodes_to_score,
        recorder=recorder,
    )


def _merge(defaults: Sequence[PluginRef], own: PluginList) -> list[PluginRef]:
    disabled = {ref.name for ref in own.disabled}
    merged = [] if "*" in disabled else [r for r in defaults if r.name not in disabled]
    for ref in own.enabled:
        merged = [r for r in merged if r.name != ref.name] + [ref]
    return merged


def _multi_weight(multi: Sequence[PluginRef], name: str) -> int:
    for ref in multi:
        if ref.name == name and ref.weight:
            return ref.weight
    return 1


def _assign(plugin_set: PluginSet, point: str, plugins: list[Plugin], weights: Mapping[str, int]) -> None:
    attribute = {
        "preEnqueue": "pre_enqueue",
        "preFilter": "pre_filter",
        "filter": "filter",
        "postFilter": "post_filter",
        "preScore": "pre_score",
        "reserve": "reserve",
        "permit": "permit",
        "preBind": "pre_bind",
        "bind": "bind",
        "postBind": "post_bind",
    }
    if point == "queueSort":
        if len(plugins) > 1:
            raise ConfigError(
                f"plugins.queueSort: only one queue sort plugin may be enabled, got {[p.name for p in plugins]}"
            )
        plugin_set.queue_sort = plugins[0] if plugins else None  # type: ignore[assignment]
    elif point == "score":
        plugin_set.score = [(p, weights.get(p.name, 1)) for p in plugins if isinstance(p, ScorePlugin)]
    else:
        setattr(plugin_set, attribute[point], plugins)


def _enabled_anywhere(plugin_set: PluginSet, plugin: Plugin) -> bool:
    lists: list[Sequence[Any]] = [
        plugin_set.pre_enqueue,
        plugin_set.pre_filter,
        plugin_set.filter,
        plugin_set.post_filter,
        plugin_set.pre_score,
        [p for p, _ in plugin_set.score],
        plugin_set.reserve,
        plugin_set.permit,
        plugin_set.pre_bind,
        plugin_set.bind,
        plugin_set.post_bind,
        [plugin_set.queue_sort] if plugin_set.queue_sort else [],
    ]
    return any(plugin in entries for entries in lists)


# ---------------------------------------------------------------------- small validators


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: must be an object, got {type(value).__name__}")
    return value


def _reject_unknown(data: Mapping[str, Any], known: set[str], path: str) -> None:
    for key in data:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            raise ConfigError(f"{where}: unknown field (known: {', '.join(sorted(known))})")


def _percentage(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
        raise ConfigError(f"{path}: must be an integer in 0..100, got {value!r}")
    return value


def _number(value: Any, path: str, *, minimum: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{path}: must be a number >= {minimum:g}, got {value!r}")
    return float(value)


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def _duration(value: Any, path: str) -> float:
    """A Go duration (``15s``, ``1m30s``, ``500ms``) in seconds."""
    match = _DURATION.match(str(value)) if isinstance(value, str) and value else None
    if match is None or not any(match.groups()):
        raise ConfigError(f"{path}: must be a duration like '15s' or '1m30s', got {value!r}")
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000
