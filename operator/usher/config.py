"""Configuration: kube-scheduler's ``kubescheduler.config.k8s.io/v1`` KubeSchedulerConfiguration (``--config``).

Parses and validates; ``usher.core.framework.building`` builds. Every field
of kube-scheduler's v1 configuration is read and type-checked as
kube-scheduler checks it, so its configuration files load unchanged:

- applied: ``profiles`` (schedulerName, plugins at every extension point and
  ``multiPoint``, pluginConfig, percentageOfNodesToScore),
  ``percentageOfNodesToScore``, ``podInitialBackoffSeconds``,
  ``podMaxBackoffSeconds``, ``leaderElection``,
  ``clientConnection.kubeconfig`` and ``metricsBindAddress`` (defaults for
  ``--kubeconfig`` and ``--metrics-bind-address``);
- accepted and ignored, each listed in ``SchedulerConfig.ignored`` for one
  start-up log line: the rest of ``clientConnection``, ``parallelism``,
  ``healthzBindAddress``, ``enableProfiling``,
  ``enableContentionProfiling``, ``delayCacheUntilActive``, and the args of
  kube-scheduler plugins usher does not implement;
- refused: non-empty ``extenders``, enabling a plugin usher does not
  implement, unknown fields and plugins, bad values: as kube-scheduler
  refuses them, and every number finite and within its Go type (int32,
  int64, float32), every duration within Go's, scheduler names DNS-1123
  subdomains.

Every refusal is a ``ConfigError`` whose message starts with the field's
path (``profiles[0].plugins.score.enabled[1].weight``); plugin args are
checked here too (by building each profile once, without a cluster).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from usher.core.framework import names
from usher.core.framework.args import go_duration
from usher.core.framework.building import ProfileError, check_profile
from usher.core.framework.interface import EXTENSION_POINTS
from usher.core.framework.profiles import PluginArgs, PluginList, PluginRef, ProfileConfig
from usher.core.framework.registry import Registry

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"


class ConfigError(ValueError):
    """Invalid configuration; the message starts with the offending field."""


@dataclass(frozen=True, slots=True)
class IgnoredField:
    """A field usher read and validated but does not act on."""

    path: str
    """Where it was written (``parallelism``, ``profiles[0].pluginConfig[3]``)."""
    reason: str
    """Why usher has nothing to do with it."""

    def __str__(self) -> str:
        return f"{self.path}: accepted and ignored by usher ({self.reason})"


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """``leaderElection``; ``--leader-elect*`` flags override it."""

    leader_elect: bool = False
    """Off by default (kube-scheduler's default is on): one usher needs no lease."""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_lock: str = "leases"
    """Only ``leases``, as kube-scheduler requires."""
    resource_name: str = ""
    """Empty: the first profile's schedulerName."""
    resource_namespace: str = ""
    """Empty: usher's own namespace."""


@dataclass(frozen=True, slots=True)
class ClientConnectionConfig:
    """``clientConnection``: only ``kubeconfig`` is applied."""

    kubeconfig: str = ""
    """The default for ``--kubeconfig``; empty: in-cluster credentials, then ``$KUBECONFIG``."""


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """A parsed, valid configuration: what usher applies, and the fields it read but ignores."""

    profiles: tuple[ProfileConfig, ...]
    percentage_of_nodes_to_score: int = 0
    """0: adaptive, as kube-scheduler."""
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    client_connection: ClientConnectionConfig = ClientConnectionConfig()
    metrics_bind_address: str | None = None
    """The default for ``--metrics-bind-address``; None: the flag's own default."""
    ignored: tuple[IgnoredField, ...] = field(default=())
    """Fields present in the file that usher accepts without acting on them (logged at start-up)."""

    @property
    def scheduler_names(self) -> list[str]:
        return [p.scheduler_name for p in self.profiles]


_PLUGIN_POINTS = {"multiPoint", *EXTENSION_POINTS}
POD_GROUP_POST_FILTER = "podGroupPostFilter"
PLACEMENT_SCORE = "placementScore"
_FOREIGN_POINTS = {"placementGenerate", PLACEMENT_SCORE, POD_GROUP_POST_FILTER}
"""Extension points of kube-scheduler's Plugins whose plugins usher picks itself: only ``disabled`` lists are
accepted (podGroupPostFilter's applies to the plugins usher runs there, PlacementFeasible's style: multiPoint's
plugins that implement it)."""
_TOP_FIELDS = {
    "apiVersion",
    "kind",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "healthzBindAddress",
    "metricsBindAddress",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "delayCacheUntilActive",
}
_PROFILE_FIELDS = {"schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"}
_LEADER_FIELDS = {
    "leaderElect",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "resourceLock",
    "resourceName",
    "resourceNamespace",
}
_CLIENT_FIELDS = {"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"}
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1123_SUBDOMAIN_MAX = 253
_DNS1123_LABEL_MAX = 63
_INT32 = 2**31
_INT64 = 2**63
_FLOAT32_MAX = 3.4028234663852886e38
LEASE_JITTER = 1.2
"""client-go's JitterFactor: the renew deadline must exceed the retry period times this."""
MAX_LEASE_SECONDS = _INT32 - 1
"""The Lease records its duration in whole seconds, an int32 (``spec.leaseDurationSeconds``)."""

_NO_PROFILING = "usher serves no profiling endpoints"
_IGNORED_TOP = {
    "parallelism": "usher runs one scheduling loop; filters and scores are not spread over goroutines",
    "healthzBindAddress": "usher serves /healthz and /readyz on the metrics address",
    "enableProfiling": _NO_PROFILING,
    "enableContentionProfiling": _NO_PROFILING,
    "delayCacheUntilActive": "usher fills its cache while a follower too, so a new leader schedules at once",
}
_IGNORED_CLIENT = {
    "acceptContentTypes": "usher talks JSON to the API server",
    "contentType": "usher talks JSON to the API server",
    "qps": "usher does not rate-limit its API calls on the client side",
    "burst": "usher does not rate-limit its API calls on the client side",
}


def default_config(scheduler_name: str = "usher") -> SchedulerConfig:
    """The configuration without ``--config``: one default profile."""
    return SchedulerConfig(profiles=(ProfileConfig(scheduler_name=scheduler_name),))


def load_config(path: str | Path, *, registry: Registry) -> SchedulerConfig:
    """Read, parse and validate a ``--config`` file (YAML or JSON)."""
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
    """Validate a KubeSchedulerConfiguration, including every profile's plugins and their args."""
    top = _object(data, "", _TOP_FIELDS)
    if top.get("apiVersion") != API_VERSION:
        raise ConfigError(f"apiVersion: must be {API_VERSION!r}, got {top.get('apiVersion')!r}")
    if top.get("kind") != KIND:
        raise ConfigError(f"kind: must be {KIND!r}, got {top.get('kind')!r}")
    ignored: list[IgnoredField] = []
    if "parallelism" in top:
        _integer(top["parallelism"], "parallelism", minimum=1, message="should be an integer value greater than zero")
    for name in ("healthzBindAddress", "metricsBindAddress"):
        if name in top:
            _string(top[name], name)
    for name in ("enableProfiling", "enableContentionProfiling", "delayCacheUntilActive"):
        if name in top:
            _boolean(top[name], name)
    ignored.extend(IgnoredField(name, reason) for name, reason in _IGNORED_TOP.items() if name in top)
    extenders = top.get("extenders") or []
    if not isinstance(extenders, list):
        raise ConfigError(f"extenders: must be a list, got {type(extenders).__name__}")
    if extenders:
        raise ConfigError(
            "extenders: usher does not call scheduler extenders; remove them, "
            "or leave the pods that need them to kube-scheduler"
        )
    percentage = _percentage(top.get("percentageOfNodesToScore", 0), "percentageOfNodesToScore")
    # int64 seconds in kube-scheduler: an integer, > 0, and the maximum no shorter than the initial backoff.
    initial = _integer(
        top.get("podInitialBackoffSeconds", 1),
        "podInitialBackoffSeconds",
        minimum=1,
        message="must be an integer greater than 0",
        bits=64,
    )
    maximum = _integer(
        top.get("podMaxBackoffSeconds", 10),
        "podMaxBackoffSeconds",
        minimum=initial,
        message=f"must be an integer greater than or equal to podInitialBackoffSeconds ({initial})",
        bits=64,
    )
    client_connection = _client_connection(top.get("clientConnection"), "clientConnection", ignored)
    leader_election = _leader_election(top.get("leaderElection"), "leaderElection")
    raw_profiles = top.get("profiles")
    if raw_profiles is None:
        raw_profiles = [{"schedulerName": "usher"}]
    if not isinstance(raw_profiles, list) or not raw_profiles:
        raise ConfigError("profiles: must be a non-empty list")
    profiles = tuple(_profile(raw, f"profiles[{i}]", registry, ignored) for i, raw in enumerate(raw_profiles))
    seen: set[str] = set()
    for profile in profiles:
        if profile.scheduler_name in seen:
            raise ConfigError(f"{profile.path}.schedulerName: duplicate scheduler name {profile.scheduler_name!r}")
        seen.add(profile.scheduler_name)
    for profile in profiles:
        try:
            check_profile(profile, registry=registry)
        except ProfileError as exc:
            raise ConfigError(str(exc)) from exc
    return SchedulerConfig(
        profiles=profiles,
        percentage_of_nodes_to_score=percentage if percentage is not None else 0,
        pod_initial_backoff_seconds=float(initial),
        pod_max_backoff_seconds=float(maximum),
        leader_election=leader_election,
        client_connection=client_connection,
        metrics_bind_address=top.get("metricsBindAddress"),
        ignored=tuple(ignored),
    )


def _profile(raw: Any, path: str, registry: Registry, ignored: list[IgnoredField]) -> ProfileConfig:
    data = _object(raw, path, _PROFILE_FIELDS)
    name = check_scheduler_name(data.get("schedulerName"), f"{path}.schedulerName")
    plugins: dict[str, PluginList] = {}
    raw_plugins = _mapping(data.get("plugins") or {}, f"{path}.plugins")
    for point, lists in raw_plugins.items():
        point_path = f"{path}.plugins.{point}"
        if point not in _PLUGIN_POINTS | _FOREIGN_POINTS:
            known = ", ".join(sorted(_PLUGIN_POINTS | _FOREIGN_POINTS))
            raise ConfigError(f"{point_path}: unknown extension point (known: {known})")
        plugin_list = _plugin_list(lists, point_path, registry)
        if point in _FOREIGN_POINTS:
            if plugin_list.enabled:
                raise ConfigError(f"{point_path}.enabled: usher has no {point} extension point")
            if point not in (POD_GROUP_POST_FILTER, PLACEMENT_SCORE):
                continue  # placementGenerate: usher's own generator, no plugins to disable
        plugins[point] = plugin_list
    plugin_config: dict[str, PluginArgs] = {}
    configured: set[str] = set()
    raw_config = data.get("pluginConfig") or []
    if not isinstance(raw_config, list):
        raise ConfigError(f"{path}.pluginConfig: must be a list")
    for i, entry in enumerate(raw_config):
        entry_path = f"{path}.pluginConfig[{i}]"
        entry_map = _object(entry, entry_path, {"name", "args"})
        plugin = entry_map.get("name")
        if not isinstance(plugin, str) or (plugin not in registry and plugin not in names.IN_TREE):
            raise ConfigError(f"{entry_path}.name: unknown plugin {plugin!r}")
        if plugin in configured:
            raise ConfigError(f"{entry_path}.name: {plugin} configured twice")
        configured.add(plugin)
        args = _typed_args(plugin, _mapping(entry_map.get("args") or {}, f"{entry_path}.args"), entry_path)
        _check_numbers(args, f"{entry_path}.args")
        if plugin in registry:
            plugin_config[plugin] = PluginArgs(args, entry_path)
        else:
            ignored.append(IgnoredField(entry_path, f"{plugin} is a kube-scheduler plugin usher does not implement"))
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
    data = _object(raw or {}, path, {"enabled", "disabled"})
    return PluginList(
        enabled=tuple(_plugin_refs(data.get("enabled"), f"{path}.enabled", registry, enabling=True)),
        disabled=tuple(_plugin_refs(data.get("disabled"), f"{path}.disabled", registry, enabling=False)),
    )


def _plugin_refs(raw: Any, path: str, registry: Registry, *, enabling: bool) -> list[PluginRef]:
    items = raw or []
    if not isinstance(items, list):
        raise ConfigError(f"{path}: must be a list")
    refs: list[PluginRef] = []
    for i, item in enumerate(items):
        item_path = f"{path}[{i}]"
        ref = _object(item, item_path, {"name", "weight"})
        name = ref.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{item_path}.name: required, got {name!r}")
        if enabling and name in names.IN_TREE and name not in registry:
            raise ConfigError(f"{item_path}.name: {name} is a kube-scheduler plugin not implemented by usher")
        if name not in registry and name not in names.IN_TREE and (enabling or name != "*"):
            raise ConfigError(f"{item_path}.name: unknown plugin {name!r} (known: {', '.join(sorted(registry))})")
        weight = ref.get("weight")
        if weight is not None:
            _integer(weight, f"{item_path}.weight", minimum=1, maximum=100, message="must be an integer in 1..100")
        refs.append(PluginRef(name, weight))
    return refs


def _typed_args(plugin: str, args: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The args without ``apiVersion``/``kind``, which kube-scheduler's own config dumps carry: as its decoder, the
    type must be the plugin's (``<Name>Args`` of kubescheduler.config.k8s.io, the v1 this file is)."""
    if "apiVersion" not in args and "kind" not in args:
        return args
    api_version, kind = args.get("apiVersion", API_VERSION), args.get("kind", f"{plugin}Args")
    if api_version != API_VERSION:
        raise ConfigError(f"{path}.args.apiVersion: must be {API_VERSION!r} (or left out), got {api_version!r}")
    if kind != f"{plugin}Args":
        group = API_VERSION.partition("/")[0]
        raise ConfigError(f"{path}: args for plugin {plugin} were not of type {plugin}Args.{group}, got {kind}.{group}")
    return {key: value for key, value in args.items() if key not in ("apiVersion", "kind")}


def _leader_election(raw: Any, path: str) -> LeaderElectionConfig:
    if raw is None:
        return LeaderElectionConfig()
    data = _object(raw, path, _LEADER_FIELDS)
    lock = data.get("resourceLock", "leases")
    if lock != "leases":
        raise ConfigError(f"{path}.resourceLock: only 'leases' is supported, got {lock!r}")
    config = LeaderElectionConfig(
        leader_elect=_boolean(data.get("leaderElect", False), f"{path}.leaderElect"),
        lease_duration=_duration(data.get("leaseDuration", "15s"), f"{path}.leaseDuration"),
        renew_deadline=_duration(data.get("renewDeadline", "10s"), f"{path}.renewDeadline"),
        retry_period=_duration(data.get("retryPeriod", "2s"), f"{path}.retryPeriod"),
        resource_lock=lock,
        resource_name=_string(data.get("resourceName", ""), f"{path}.resourceName"),
        resource_namespace=_string(data.get("resourceNamespace", ""), f"{path}.resourceNamespace"),
    )
    if config.leader_elect:
        # As kube-scheduler, only when leader election is on; `--leader-elect` turning it on checks the result.
        check_leader_election(
            name=(f"{path}.resourceName", config.resource_name),
            namespace=(f"{path}.resourceNamespace", config.resource_namespace),
            lease_duration=(f"{path}.leaseDuration", config.lease_duration),
            renew_deadline=(f"{path}.renewDeadline", config.renew_deadline),
            retry_period=(f"{path}.retryPeriod", config.retry_period),
        )
    return config


def check_leader_election(
    *,
    name: tuple[str, str],
    namespace: tuple[str, str],
    lease_duration: tuple[str, float],
    renew_deadline: tuple[str, float],
    retry_period: tuple[str, float],
) -> None:
    """Leader election's settings, each ``(where it was set, value)``: a field of the file or a flag.

    The timings as kube-scheduler refuses them (component-base's
    ValidateLeaderElectionConfiguration, then client-go's NewLeaderElector):
    each finite and greater than zero, ``leaseDuration > renewDeadline >
    1.2 x retryPeriod``; the lease duration also fits the Lease's int32
    ``leaseDurationSeconds``. The Lease's name must be a DNS-1123 subdomain
    and its namespace a DNS-1123 label (empty: usher's defaults).
    """
    for where, seconds in (lease_duration, renew_deadline, retry_period):
        if not math.isfinite(seconds):
            raise ConfigError(f"{where}: must be a finite duration, got {_seconds(seconds)}")
        if seconds <= 0:
            raise ConfigError(f"{where}: must be greater than zero, got {_seconds(seconds)}")
    (lease, lease_s), (renew, renew_s), (retry, retry_s) = lease_duration, renew_deadline, retry_period
    if lease_s > MAX_LEASE_SECONDS:
        raise ConfigError(
            f"{lease}: must be at most {MAX_LEASE_SECONDS}s (the Lease's leaseDurationSeconds is an int32), "
            f"got {_seconds(lease_s)}"
        )
    if lease_s <= renew_s:
        raise ConfigError(f"{lease}: must be greater than {renew} ({_seconds(renew_s)}), got {_seconds(lease_s)}")
    if renew_s <= LEASE_JITTER * retry_s:
        raise ConfigError(
            f"{renew}: must be greater than {retry} x {LEASE_JITTER:g} ({_seconds(LEASE_JITTER * retry_s)}), "
            f"got {_seconds(renew_s)}"
        )
    where, value = name
    if value and not _is_dns1123_subdomain(value):
        raise ConfigError(f"{where}: the Lease's name must be a DNS-1123 subdomain ({_SUBDOMAIN_RULE}), got {value!r}")
    where, value = namespace
    if value and (len(value) > _DNS1123_LABEL_MAX or not re.fullmatch(_DNS1123_LABEL, value)):
        raise ConfigError(
            f"{where}: must be a DNS-1123 label (lower case alphanumeric characters or '-', starting and ending "
            f"with an alphanumeric character, at most {_DNS1123_LABEL_MAX} characters), got {value!r}"
        )


_SUBDOMAIN_RULE = (
    "lower case alphanumeric characters, '-' or '.', each dot-separated part starting and ending with an "
    f"alphanumeric character, at most {_DNS1123_SUBDOMAIN_MAX} characters"
)


def check_scheduler_name(name: Any, where: str) -> str:
    """A scheduler name (``profiles[].schedulerName``, ``--scheduler-name``): a DNS-1123 subdomain, as every object
    name; it is also the default name of the leader-election Lease."""
    if not isinstance(name, str) or not _is_dns1123_subdomain(name):
        raise ConfigError(f"{where}: must be a DNS-1123 subdomain ({_SUBDOMAIN_RULE}), got {name!r}")
    return name


def _is_dns1123_subdomain(value: str) -> bool:
    """apimachinery's IsDNS1123Subdomain."""
    return 0 < len(value) <= _DNS1123_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(value) is not None


def _seconds(seconds: float) -> str:
    return f"{seconds:g}s" if math.isfinite(seconds) else repr(seconds)


def _client_connection(raw: Any, path: str, ignored: list[IgnoredField]) -> ClientConnectionConfig:
    if raw is None:
        return ClientConnectionConfig()
    data = _object(raw, path, _CLIENT_FIELDS)
    for name in ("acceptContentTypes", "contentType"):
        if name in data:
            _string(data[name], f"{path}.{name}")
    if "qps" in data:
        _float32(data["qps"], f"{path}.qps")
    if "burst" in data:
        _integer(data["burst"], f"{path}.burst", minimum=0, message="must be non-negative")
    ignored.extend(IgnoredField(f"{path}.{name}", reason) for name, reason in _IGNORED_CLIENT.items() if name in data)
    return ClientConnectionConfig(kubeconfig=_string(data.get("kubeconfig", ""), f"{path}.kubeconfig"))


# ---------------------------------------------------------------------- small validators


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path or '(top level)'}: must be an object, got {type(value).__name__}")
    return value


def _object(value: Any, path: str, known: set[str]) -> dict[str, Any]:
    """An object with only ``known`` fields, its null fields dropped (null means unset, as in Go's decoding)."""
    data = _mapping(value, path)
    for key in data:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            raise ConfigError(f"{where}: unknown field (known: {', '.join(sorted(known))})")
    return {key: item for key, item in data.items() if item is not None}


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{path}: must be a string, got {value!r}")
    return value


def _boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: must be true or false, got {value!r}")
    return value


def _integer(value: Any, path: str, *, minimum: int, maximum: int | None = None, message: str, bits: int = 32) -> int:
    """An integer field of kube-scheduler's configuration: ``message`` says what it must be. A whole float (YAML's
    ``2.0``) counts, as in kube-scheduler's decoding; a value its Go type (int``bits``) cannot hold does not."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        raise ConfigError(f"{path}: {message}, got {value!r}")
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ConfigError(f"{path}: out of range for an int{bits}, got {value!r}")
    return value


def _percentage(value: Any, path: str) -> int | None:
    if value is None:
        return None
    return _integer(value, path, minimum=0, maximum=100, message="must be an integer in 0..100")


def _float32(value: Any, path: str) -> float:
    """A float32 field (``clientConnection.qps``): finite, as JSON writes every number, and in float32's range."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigError(f"{path}: must be a number, got {value!r}")
    if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
        raise ConfigError(f"{path}: must be a finite number within float32's range, got {value!r}")
    return float(value)


def _check_numbers(value: Any, path: str) -> None:
    """Every number in plugin args is one JSON can write and Go can decode: a finite float, an integer within int64
    (kube-scheduler's Args have no wider field). Each plugin then checks its own ranges."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_numbers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_numbers(item, f"{path}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{path}: must be a finite number, got {value!r}")
    elif isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
        raise ConfigError(f"{path}: out of range for an int64, got {value!r}")


def _duration(value: Any, path: str) -> float:
    """A Go duration (``15s``, ``1m30s``, ``500ms``) in seconds; its range is the caller's to check."""
    seconds = go_duration(value)
    if seconds is None:
        raise ConfigError(f"{path}: must be a duration like '15s' or '1m30s', got {value!r}")
    return seconds
