"""Building a profile's framework: kube-scheduler's multiPoint / enabled / disabled rules, checked without a cluster."""

from __future__ import annotations

import re

import pytest

from tests.frameworks import FakeHandle
from usher.core.framework.building import ProfileError, build_framework, check_profile
from usher.core.framework.profiles import PluginArgs, PluginList, PluginRef, ProfileConfig
from usher.core.framework.registry import Registry
from usher.core.plugins.registry import in_tree_registry


def profile(path: str = "profiles[0]", **plugins: PluginList) -> ProfileConfig:
    return ProfileConfig(scheduler_name="usher", plugins=plugins, path=path)


def test_the_default_profile_has_kube_schedulers_plugins_in_order() -> None:
    fw = build_framework(profile(), registry=in_tree_registry(), handle=FakeHandle())
    assert [p.name for p in fw.plugins.pre_enqueue] == [
        "SchedulingGates",
        "DynamicResources",
        "DefaultPreemption",
        "GangScheduling",
    ]
    assert fw.plugins.queue_sort is not None and fw.plugins.queue_sort.name == "PrioritySort"
    assert [p.name for p in fw.plugins.pre_filter] == [
        "NodeAffinity",
        "NodePorts",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
    ]
    assert [p.name for p in fw.plugins.filter] == [
        "NodeName",
        "NodeUnschedulable",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
    ]
    assert [(p.name, w) for p, w in fw.plugins.score] == [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("VolumeBinding", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("DynamicResources", 2),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
    ]
    assert [p.name for p in fw.plugins.reserve] == ["VolumeBinding", "DynamicResources"]
    assert [p.name for p in fw.plugins.pre_bind] == ["VolumeBinding", "DynamicResources"]
    assert [p.name for p in fw.plugins.bind] == ["DefaultBinder"]
    assert [p.name for p in fw.plugins.post_filter] == ["DynamicResources", "DefaultPreemption"]
    assert [p.name for p in fw.plugins.pod_group_post_filter] == ["DynamicResources"]
    assert [p.name for p in fw.plugins.permit] == [p.name for p in fw.plugins.placement_feasible] == ["GangScheduling"]
    assert [(p.name, w) for p, w in fw.plugins.placement_score] == [("NodeResourcesFit", 1)]
    assert fw.plugins.post_bind == []
    assert len([p.name for p in fw.plugins.all]) == len(set([p.name for p in fw.plugins.all])) == 20
    assert "NoNodesAvailable" in fw.queueing_hints and "SchedulingGates" in fw.queueing_hints


def test_disabling_a_plugin_at_one_extension_point_keeps_it_elsewhere() -> None:
    fw = build_framework(
        profile(score=PluginList(disabled=(PluginRef("NodeResourcesFit"),))),
        registry=in_tree_registry(),
        handle=FakeHandle(),
    )
    assert "NodeResourcesFit" not in [p.name for p, _ in fw.plugins.score]
    assert "NodeResourcesFit" in [p.name for p in fw.plugins.filter]


def test_multipoint_star_disables_every_default() -> None:
    fw = build_framework(
        profile(
            multiPoint=PluginList(
                enabled=(PluginRef("PrioritySort"), PluginRef("DefaultBinder")), disabled=(PluginRef("*"),)
            )
        ),
        registry=in_tree_registry(),
        handle=FakeHandle(),
    )
    assert fw.plugins.filter == [] and fw.plugins.pre_enqueue == [] and fw.plugins.score == []
    assert [p.name for p in fw.plugins.all] == ["PrioritySort", "DefaultBinder"]


def test_an_enabled_entry_moves_the_plugin_last_with_its_own_weight() -> None:
    fw = build_framework(
        profile(score=PluginList(enabled=(PluginRef("TaintToleration", weight=7),))),
        registry=in_tree_registry(),
        handle=FakeHandle(),
    )
    assert [(p.name, w) for p, w in fw.plugins.score][-1] == ("TaintToleration", 7)
    assert [p.name for p, _ in fw.plugins.score].count("TaintToleration") == 1


def test_a_plugin_enabled_at_score_without_a_weight_weighs_1_not_its_multipoint_weight() -> None:
    """kube-scheduler's getValidScoreWeights reads the score point's entries before multiPoint's and makes a
    missing weight 1; multiPoint's weight counts only for plugins the score point does not name."""
    fw = build_framework(
        profile(
            multiPoint=PluginList(enabled=(PluginRef("NodeResourcesFit", weight=4),)),
            score=PluginList(disabled=(PluginRef("*"),), enabled=(PluginRef("NodeResourcesFit"),)),
        ),
        registry=in_tree_registry(),
        handle=FakeHandle(),
    )
    assert [(p.name, w) for p, w in fw.plugins.score] == [("NodeResourcesFit", 1)]
    fw = build_framework(
        profile(score=PluginList(enabled=(PluginRef("TaintToleration"),))),
        registry=in_tree_registry(),
        handle=FakeHandle(),
    )
    weights = dict((p.name, w) for p, w in fw.plugins.score)
    assert weights["TaintToleration"] == 1 and weights["NodeAffinity"] == 2  # the default's 3 and 2 otherwise


def test_a_score_weight_comes_from_multipoint_where_the_score_point_does_not_name_the_plugin() -> None:
    fw = build_framework(
        profile(multiPoint=PluginList(enabled=(PluginRef("NodeResourcesFit", weight=4),))),
        registry=in_tree_registry(),
        handle=FakeHandle(),
    )
    assert dict((p.name, w) for p, w in fw.plugins.score)["NodeResourcesFit"] == 4


def test_a_profile_without_a_queue_sort_plugin_is_refused() -> None:
    with pytest.raises(ProfileError, match="^" + re.escape("profiles[2].plugins.queueSort: a queue sort plugin")):
        check_profile(
            profile("profiles[2]", queueSort=PluginList(disabled=(PluginRef("*"),))), registry=in_tree_registry()
        )


def test_checking_a_profile_names_the_args_field_without_any_handle() -> None:
    bad = ProfileConfig(
        scheduler_name="usher",
        plugin_config={
            "NodeResourcesFit": PluginArgs({"scoringStrategy": {"type": "Bogus"}}, "profiles[0].pluginConfig[3]")
        },
    )
    with pytest.raises(ProfileError, match="^" + re.escape("profiles[0].pluginConfig[3].args.scoringStrategy.type: ")):
        check_profile(bad, registry=in_tree_registry())


def test_a_plugin_using_a_port_while_only_checked_is_a_bug_said_out_loud() -> None:
    used: list[str] = []

    class Eager:
        name = "Eager"

        def __init__(self, handle: object) -> None:
            try:
                handle.waiting_pods.allow("ns/p", "Eager")  # type: ignore[attr-defined]
            except RuntimeError as exc:
                used.append(str(exc))

    registry = in_tree_registry()
    registry.register("Eager", lambda args, handle: Eager(handle))  # type: ignore[arg-type,return-value]
    check_profile(
        ProfileConfig(scheduler_name="usher", plugin_config={"Eager": PluginArgs({}, "profiles[0].pluginConfig[0]")}),
        registry=registry,
    )
    assert used == ["a plugin used a port while its profile was only being checked"]


def test_the_registry_refuses_duplicate_names() -> None:
    registry = Registry()
    registry.register("A", lambda args, handle: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="already registered"):
        registry.register("A", lambda args, handle: None)  # type: ignore[arg-type,return-value]


def test_placement_score_plugins_come_from_multi_point_with_its_weights_and_may_be_disabled_there() -> None:
    weighted = profile(multiPoint=PluginList(enabled=(PluginRef("NodeResourcesFit", 3),)))
    fw = build_framework(weighted, registry=in_tree_registry(), handle=FakeHandle())
    assert [(p.name, w) for p, w in fw.plugins.placement_score] == [("NodeResourcesFit", 3)]
    for disabled in ("NodeResourcesFit", "*"):
        off = profile(placementScore=PluginList(disabled=(PluginRef(disabled),)))
        fw = build_framework(off, registry=in_tree_registry(), handle=FakeHandle())
        assert fw.plugins.placement_score == [], disabled
        assert "NodeResourcesFit" in [p.name for p, _ in fw.plugins.score], "only that point loses it"


@pytest.mark.parametrize(
    ("point", "name", "counted"),
    [
        (None, "", True),
        ("placementScore", "PodGroupPodsCount", False),
        ("multiPoint", "PodGroupPodsCount", False),
        ("placementScore", "*", False),
        ("placementScore", "NodeResourcesFit", True),
    ],
)
def test_pod_group_pods_count_scores_placements_unless_disabled(point: str | None, name: str, counted: bool) -> None:
    plugins = {point: PluginList(disabled=(PluginRef(name),))} if point else {}
    fw = build_framework(profile(**plugins), registry=in_tree_registry(), handle=FakeHandle())
    assert fw.plugins.pod_group_pods_count is counted
