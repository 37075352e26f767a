"""PodGroups and Workloads are watched only when the API server serves them; what usher writes to a PodGroup.

`watching.discover` reads the discovery document of scheduling.k8s.io/v1beta1
(a beta API kube-apiserver serves only when told to); only the kinds found
are registered, listed and reconciled, at their own version. The PodGroup
condition patch is built as kube-scheduler's updatePodGroupCondition.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import make_pod_group
from usher.adapters import watching
from usher.adapters.kubeapi import ApiResult
from usher.adapters.podgroup_status import pod_group_condition_call, pod_group_condition_patch

SERVED = {
    "kind": "APIResourceList",
    "groupVersion": "scheduling.k8s.io/v1beta1",
    "resources": [
        {"name": "podgroups", "namespaced": True, "kind": "PodGroup"},
        {"name": "podgroups/status", "namespaced": True, "kind": "PodGroup"},
        {"name": "workloads", "namespaced": True, "kind": "Workload"},
    ],
}


@dataclass
class ScriptedApi:
    """Answers each GET with the next scripted answer (an ApiResult or an exception); records the paths."""

    answers: list[ApiResult | Exception]
    paths: list[str] = field(default_factory=list)

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> ApiResult:
        self.paths.append(path)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def no_sleep(seconds: float) -> None:
    pass


@pytest.mark.parametrize(
    ("answers", "served", "gets"),
    [
        ([ApiResult(200, SERVED)], watching.WORKLOAD_KINDS, 1),
        ([ApiResult(404, {"message": "the server could not find the requested resource"})], (), 1),
        (
            [ApiResult(200, {**SERVED, "resources": [{"name": "workloads"}]})],
            (watching.WORKLOADS,),
            1,
        ),
        (
            [ApiResult(503, {"message": "etcd is busy"}), OSError("reset"), ApiResult(200, SERVED)],
            watching.WORKLOAD_KINDS,
            3,
        ),
        ([ApiResult(500, {"message": "broken"})] * 5, (), 5),
    ],
    ids=[
        "served",
        "not served (beta APIs off)",
        "only Workloads served",
        "a failure, then an answer",
        "failing every time: started without them",
    ],
)
async def test_discover_finds_which_pod_group_kinds_the_api_server_serves(
    answers: list[ApiResult | Exception], served: tuple[watching.Kind, ...], gets: int, caplog: pytest.LogCaptureFixture
) -> None:
    api = ScriptedApi(list(answers))
    with caplog.at_level(logging.WARNING):
        found = await watching.discover(api, watching.WORKLOAD_KINDS, sleep=no_sleep)  # type: ignore[arg-type]
    assert found == served
    assert api.paths == ["/apis/scheduling.k8s.io/v1beta1"] * gets
    assert ("starting without" in caplog.text) == (gets == 5)


class Sink:
    def __init__(self) -> None:
        self.pod_groups: list[tuple[str | None, str]] = []
        self.workloads: list[tuple[str | None, str]] = []

    def on_pod_group(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.pod_groups.append((event_type, raw["metadata"]["name"]))

    def on_workload(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.workloads.append((event_type, raw["metadata"]["name"]))

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


@pytest.mark.parametrize(
    ("optional", "extra"),
    [((), []), (watching.WORKLOAD_KINDS, ["podgroups", "workloads"]), ((watching.POD_GROUPS,), ["podgroups"])],
    ids=["not served: not watched", "both served: both watched", "PodGroups alone"],
)
def test_only_the_served_kinds_are_watched_listed_and_reconciled_at_their_version(
    optional: tuple[watching.Kind, ...], extra: list[str]
) -> None:
    sink = Sink()
    watches = watching.register(sink, optional=optional)  # type: ignore[arg-type]
    streamed = watches.streams.kinds
    assert len(streamed) == len(watching.KINDS) + len(extra)
    assert [(group, watching.version(group, plural), plural) for group, plural in streamed[len(watching.KINDS) :]] == [
        ("scheduling.k8s.io", "v1beta1", plural) for plural in extra
    ]
    assert sorted(watches.reconciler.holdings.objects) == sorted([*(p for _, p in watching.KINDS), *extra])
    for plural in extra:
        watches.reconciler.holdings.deliver(plural, "MODIFIED", make_pod_group("train-0"))
    assert sink.pod_groups == ([("MODIFIED", "train-0")] if "podgroups" in extra else [])
    assert sink.workloads == ([("MODIFIED", "train-0")] if "workloads" in extra else [])


async def test_the_lister_reads_pod_groups_at_v1beta1() -> None:
    api = ScriptedApi([ApiResult(200, {"items": [{"metadata": {"uid": "u1"}}], "metadata": {}})])
    keys = await watching.api_lister(api)("scheduling.k8s.io", "podgroups")  # type: ignore[arg-type]
    assert list(keys or ()) == ["u1"]
    assert api.paths == ["/apis/scheduling.k8s.io/v1beta1/podgroups?limit=500"]


# -- the PodGroupInitiallyScheduled condition ------------------------------------------------


def with_condition(status: str, reason: str, message: str, generation: int = 1) -> dict[str, Any]:
    raw = make_pod_group("train", 3, generation=generation)
    raw["status"] = {
        "conditions": [
            {
                "type": "PodGroupInitiallyScheduled",
                "status": status,
                "reason": reason,
                "message": message,
                "observedGeneration": 1,
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    return raw


@pytest.mark.parametrize(
    ("current", "status", "reason", "message", "patched", "transition_kept"),
    [
        (make_pod_group("train", 3), "False", "Unschedulable", "minCount (3) cannot be satisfied", True, False),
        (with_condition("False", "Unschedulable", "m"), "False", "Unschedulable", "m", False, False),
        (with_condition("False", "Unschedulable", "m"), "False", "Unschedulable", "other", True, True),
        (with_condition("False", "Unschedulable", "m", generation=2), "False", "Unschedulable", "m", True, True),
        (with_condition("False", "Unschedulable", "m"), "True", "Scheduled", "", True, False),
        (with_condition("True", "Scheduled", ""), "False", "Unschedulable", "m", False, False),
        (with_condition("True", "Scheduled", ""), "False", "SchedulerError", "m", False, False),
    ],
    ids=[
        "a first condition",
        "the same again: nothing sent",
        "a new message keeps the transition time",
        "a new generation is observed",
        "scheduled at last",
        "True is never turned back to Unschedulable",
        "nor to SchedulerError",
    ],
)
def test_the_condition_patch_changes_only_what_changed_and_never_regresses(
    current: dict[str, Any], status: str, reason: str, message: str, patched: bool, transition_kept: bool
) -> None:
    patch = pod_group_condition_patch(
        current, kind="PodGroupInitiallyScheduled", status=status, reason=reason, message=message
    )
    assert (patch is not None) == patched
    if patch is not None:
        [condition] = patch["status"]["conditions"]
        assert (condition["status"], condition["reason"], condition["message"]) == (status, reason, message)
        assert condition["observedGeneration"] == current["metadata"]["generation"]
        assert (condition["lastTransitionTime"] == "2026-01-01T00:00:00Z") == transition_kept


def test_the_condition_call_patches_the_status_subresource_under_its_own_key() -> None:
    call = pod_group_condition_call(
        make_pod_group("train", 3, namespace="ml"),
        kind="PodGroupInitiallyScheduled",
        status="True",
        reason="Scheduled",
        message="",
    )
    request = call.build(None)
    assert call.object_key == "podgroups/ml/train"  # never the key of a pod named the same
    assert request is not None and request.method == "PATCH"
    assert request.path == "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/train/status"
    assert request.content_type == "application/strategic-merge-patch+json"
