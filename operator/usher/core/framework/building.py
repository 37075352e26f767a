"""Building a profile's framework: plugins instantiated once, sorted into extension points. Pure.

kube-scheduler's rules, applied to the default profile's ``multiPoint``
list (``DEFAULT_PLUGINS``):

- ``multiPoint`` enables a plugin at every extension point it implements;
  its ``enabled`` entries add to (or replace) the defaults, ``disabled``
  removes them (``*``: all of them);
- an extension point's own ``disabled`` removes plugins there only (``*``:
  every plugin coming from ``multiPoint``), its ``enabled`` adds plugins
  after those (moving one already there to the end) and must name a plugin
  implementing that point;
- a score weight comes from the point's own entry (1 when that entry gives
  none, as in kube-scheduler), else the ``multiPoint`` entry, else 1.

``check_profile`` does all of it without a cluster, so a bad profile stops
usher before it connects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from usher.core.cache import DisruptionBudget, NodeInfo
from usher.core.dra.ports import ClaimWriter
from usher.core.dra.state import DraState
from usher.core.framework import names
from usher.core.framework.args import PluginArgsError
from usher.core.framework.interface import (
    EXTENSION_POINTS,
    Binder,
    BindPlugin,
    FilterPlugin,
    Handle,
    NominatedPods,
    PermitPlugin,
    PlacementFeasiblePlugin,
    PlacementScorePlugin,
    Plugin,
    PodGroupPostFilterPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreemptionsInFlight,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
    WaitingPods,
)
from usher.core.framework.profiles import PluginList, PluginRef, ProfileConfig
from usher.core.framework.registry import Registry
from usher.core.framework.runtime import Framework, FrameworkRecorder, PluginSet
from usher.core.podgroups import PodGroupStates
from usher.core.types import NodeName, PodInfo, PodKey, Status, WriteResult
from usher.core.volumes.ports import VolumeWriter
from usher.core.volumes.state import VolumeState

DEFAULT_PLUGINS: tuple[PluginRef, ...] = (
    PluginRef(names.SCHEDULING_GATES),
    PluginRef(names.PRIORITY_SORT),
    PluginRef(names.NODE_NAME),
    PluginRef(names.NODE_UNSCHEDULABLE),
    PluginRef(names.TAINT_TOLERATION, weight=3),
    PluginRef(names.NODE_AFFINITY, weight=2),
    PluginRef(names.NODE_PORTS),
    PluginRef(names.NODE_RESOURCES_FIT, weight=1),
    PluginRef(names.VOLUME_RESTRICTIONS),
    PluginRef(names.NODE_VOLUME_LIMITS),
    PluginRef(names.VOLUME_BINDING),
    PluginRef(names.VOLUME_ZONE),
    PluginRef(names.POD_TOPOLOGY_SPREAD, weight=2),
    PluginRef(names.INTER_POD_AFFINITY, weight=2),
    PluginRef(names.DYNAMIC_RESOURCES, weight=2),
    PluginRef(names.DEFAULT_PREEMPTION),
    PluginRef(names.NODE_RESOURCES_BALANCED_ALLOCATION, weight=1),
    PluginRef(names.IMAGE_LOCALITY, weight=1),
    PluginRef(names.DEFAULT_BINDER),
    PluginRef(names.GANG_SCHEDULING),
)
"""The default profile's multiPoint list, in kube-scheduler's order (without the plugins usher lacks).

GangScheduling is appended as kube-scheduler appends it when its GenericWorkload gate is on: usher's
gate is on by default. With gang support off the plugin stays in the list and does nothing."""


class ProfileError(ValueError):
    """A profile whose plugins cannot be built; the message starts with the offending field's path."""


def build_framework(
    profile: ProfileConfig,
    *,
    registry: Registry,
    handle: Handle,
    recorder: FrameworkRecorder | None = None,
    nominated: NominatedPods | None = None,
) -> Framework:
    """Instantiate a profile's plugins (each once, with its args) and sort them into extension points.

    ``nominated``: the pods preemption nominated, which Filter counts (None: none ever are).
    """
    plugins = _plugin_set(profile, _Instances(profile, registry, handle))
    return Framework(
        profile.scheduler_name,
        plugins,
        percentage_of_nodes_to_score=profile.percentage_of_nodes_to_score,
        recorder=recorder,
        nominated=nominated,
    )


def check_profile(profile: ProfileConfig, *, registry: Registry) -> None:
    """Raise ``ProfileError`` where ``build_framework`` would, without a cluster.

    Builds the profile against a handle whose ports refuse every call, and
    also parses the args of configured plugins the profile does not enable
    (kube-scheduler validates those too).
    """
    instances = _Instances(profile, registry, _UnconnectedHandle())
    _plugin_set(profile, instances)
    for name in profile.plugin_config:
        instances.get(name)


class _Instances:
    """The profile's plugins, each built on first use with its ``pluginConfig`` args."""

    def __init__(self, profile: ProfileConfig, registry: Registry, handle: Handle) -> None:
        self._profile = profile
        self._registry = registry
        self._handle = handle
        self.built: dict[str, Plugin] = {}

    def get(self, name: str) -> Plugin:
        if name not in self.built:
            configured = self._profile.plugin_config.get(name)
            try:
                self.built[name] = self._registry.factory(name)(configured.args if configured else {}, self._handle)
            except PluginArgsError as exc:
                if configured is None:
                    raise ProfileError(f"{self._profile.path}: plugin {name} needs pluginConfig args: {exc}") from exc
                where = f"{configured.path}.args.{exc.field}" if exc.field else f"{configured.path}.args"
                raise ProfileError(f"{where}: {exc.message}") from exc
        return self.built[name]


def _plugin_set(profile: ProfileConfig, instances: _Instances) -> PluginSet:
    multi = _merge(DEFAULT_PLUGINS, profile.plugins.get("multiPoint", PluginList()))
    chosen: dict[str, list[PluginRef]] = {}
    for point, protocol in EXTENSION_POINTS.items():
        own = profile.plugins.get(point, PluginList())
        disabled = {ref.name for ref in own.disabled}
        refs = [] if "*" in disabled else [r for r in multi if r.name not in disabled]
        refs = [r for r in refs if isinstance(instances.get(r.name), protocol)]
        for ref in own.enabled:
            if not isinstance(instances.get(ref.name), protocol):
                raise ProfileError(f"{profile.path}.plugins.{point}: plugin {ref.name} does not implement {point}")
            refs = [r for r in refs if r.name != ref.name] + [ref]
        chosen[point] = refs

    def at(point: str) -> list[Plugin]:
        return [instances.get(ref.name) for ref in chosen[point]]

    def disabled_at(point: str) -> set[str]:
        """The plugins a point that takes ``disabled`` lists only (multiPoint's plugins run there) leaves out."""
        names = {ref.name for ref in profile.plugins.get(point, PluginList()).disabled}
        return {ref.name for ref in multi} if "*" in names else names

    pod_group_post_filter_disabled = disabled_at("podGroupPostFilter")
    placement_score_disabled = disabled_at("placementScore")
    # PodGroupPodsCount is the group cycle's own (no plugin object): only whether it is disabled matters.
    pod_group_pods_count = not any(
        ref.name in (names.POD_GROUP_PODS_COUNT, "*")
        for point in ("multiPoint", "placementScore")
        for ref in profile.plugins.get(point, PluginList()).disabled
    )

    # A plugin enabled at score without a weight weighs 1, not its multiPoint weight: kube-scheduler's framework
    # takes the score point's weights first and makes a missing one 1 (runtime.NewFramework).
    own_score = {ref.name for ref in profile.plugins.get("score", PluginList()).enabled}
    queue_sort = [p for p in at("queueSort") if isinstance(p, QueueSortPlugin)]
    if len(queue_sort) > 1:
        raise ProfileError(
            f"{profile.path}.plugins.queueSort: only one queue sort plugin may be enabled, "
            f"got {[p.name for p in queue_sort]}"
        )
    plugin_set = PluginSet(
        pre_enqueue=[p for p in at("preEnqueue") if isinstance(p, PreEnqueuePlugin)],
        queue_sort=queue_sort[0] if queue_sort else None,
        pre_filter=[p for p in at("preFilter") if isinstance(p, PreFilterPlugin)],
        filter=[p for p in at("filter") if isinstance(p, FilterPlugin)],
        post_filter=[p for p in at("postFilter") if isinstance(p, PostFilterPlugin)],
        pre_score=[p for p in at("preScore") if isinstance(p, PreScorePlugin)],
        score=[
            (plugin, ref.weight or (1 if ref.name in own_score else _multi_weight(multi, ref.name)))
            for ref in chosen["score"]
            if isinstance(plugin := instances.get(ref.name), ScorePlugin)
        ],
        reserve=[p for p in at("reserve") if isinstance(p, ReservePlugin)],
        permit=[p for p in at("permit") if isinstance(p, PermitPlugin)],
        pre_bind=[p for p in at("preBind") if isinstance(p, PreBindPlugin)],
        bind=[p for p in at("bind") if isinstance(p, BindPlugin)],
        post_bind=[p for p in at("postBind") if isinstance(p, PostBindPlugin)],
        placement_feasible=[
            plugin for ref in multi if isinstance(plugin := instances.get(ref.name), PlacementFeasiblePlugin)
        ],
        pod_group_pods_count=pod_group_pods_count,
        placement_score=[
            (plugin, _multi_weight(multi, ref.name))
            for ref in multi
            if ref.name not in placement_score_disabled
            and isinstance(plugin := instances.get(ref.name), PlacementScorePlugin)
        ],
        pod_group_post_filter=[
            plugin
            for ref in multi
            if ref.name not in pod_group_post_filter_disabled
            and isinstance(plugin := instances.get(ref.name), PodGroupPostFilterPlugin)
        ],
    )
    if plugin_set.queue_sort is None:
        raise ProfileError(f"{profile.path}.plugins.queueSort: a queue sort plugin is required")
    if not plugin_set.bind:
        raise ProfileError(f"{profile.path}.plugins.bind: a bind plugin is required")
    enabled = {ref.name for refs in chosen.values() for ref in refs} | {
        p.name
        for p in (
            *plugin_set.placement_feasible,
            *(plugin for plugin, _ in plugin_set.placement_score),
            *plugin_set.pod_group_post_filter,
        )
    }
    plugin_set.all.extend(plugin for name, plugin in instances.built.items() if name in enabled)
    return plugin_set


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


class _Unconnected:
    """The ports of a handle for checking profiles: plugins may keep them; any call is a bug."""

    def _refuse(self) -> NoReturn:
        raise RuntimeError("a plugin used a port while its profile was only being checked")

    async def bind(self, pod: PodInfo, node: NodeName) -> Status:
        self._refuse()

    def allow(self, key: PodKey, plugin: str) -> None:
        self._refuse()

    def reject(self, key: PodKey, plugin: str, message: str) -> None:
        self._refuse()

    async def get(self, namespace: str, name: str) -> WriteResult:
        self._refuse()

    async def update(self, claim: Mapping[str, Any]) -> WriteResult:
        self._refuse()

    async def update_status(self, claim: Mapping[str, Any]) -> WriteResult:
        self._refuse()

    def remove_reservation(self, namespace: str, name: str, claim_uid: str, pod_uid: str) -> None:
        self._refuse()

    async def create(self, claim: Mapping[str, Any]) -> WriteResult:
        self._refuse()

    def delete_claim(self, namespace: str, name: str, claim_uid: str) -> None:
        self._refuse()

    async def set_extended_claim_status(
        self, namespace: str, pod: str, pod_uid: str, status: Mapping[str, Any]
    ) -> WriteResult:
        self._refuse()

    def deallocate(
        self, namespace: str, name: str, claim_uid: str, resource_version: str, failed: Callable[[], None]
    ) -> None:
        self._refuse()

    async def update_volume(self, volume: Mapping[str, Any]) -> WriteResult:
        self._refuse()

    async def update_claim(self, claim: Mapping[str, Any]) -> WriteResult:
        self._refuse()

    async def changed(self, within: float) -> bool:
        self._refuse()


class _UnconnectedHandle:
    """A ``Handle`` before usher is connected: empty DRA and volume state, ports that refuse every call."""

    def __init__(self) -> None:
        self._ports = _Unconnected()
        self._dra = DraState()
        self._volumes = VolumeState()
        self._pod_groups = PodGroupStates()

    @property
    def binder(self) -> Binder:
        return self._ports

    @property
    def waiting_pods(self) -> WaitingPods:
        return self._ports

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return None

    def namespace_generation(self) -> int:
        return 0

    @property
    def dra(self) -> DraState:
        return self._dra

    @property
    def claims(self) -> ClaimWriter:
        return self._ports

    def disruption_budgets(self, namespace: str) -> Sequence[DisruptionBudget]:
        return []

    def service_selectors(self, namespace: str) -> Sequence[Mapping[str, str]]:
        return []

    @property
    def preemptions(self) -> PreemptionsInFlight:
        return _NoPreemptions()

    @property
    def volumes(self) -> VolumeState:
        return self._volumes

    @property
    def volume_writer(self) -> VolumeWriter:
        return self._ports

    def node_labels(self, node: str) -> Mapping[str, str] | None:
        return None

    def node_info(self, node: str) -> NodeInfo | None:
        return None

    def image(self, name: str) -> tuple[int, int] | None:
        return None

    def node_count(self) -> int:
        return 0

    def nominated_pods(self, node: str) -> Sequence[PodInfo]:
        return []

    def node_of_pod(self, key: PodKey) -> NodeInfo | None:
        return None

    @property
    def pod_groups(self) -> PodGroupStates:
        return self._pod_groups


class _NoPreemptions:
    def running(self, uid: str) -> bool:
        return False

    def evicting(self, key: PodKey) -> bool:
        return False
