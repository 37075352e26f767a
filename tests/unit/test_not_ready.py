"""KEP-5501 in the queue: PreEnqueue rejections are reported once per new message, cleared on passing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.builders import make_pod
from tests.frameworks import framework
from usher.core.clock import FakeClock
from usher.core.events import NODE_ADD, pod_update_events
from usher.core.queue import QueuedPod, QueueOptions, SchedulingQueue
from usher.core.types import PodInfo, PodKey

GATES = "Scheduling is blocked due to non-empty scheduling gates"


@dataclass
class Reports:
    log: list[tuple[str, str]] = field(default_factory=list)

    def rejected(self, queued: QueuedPod, message: str) -> None:
        self.log.append((queued.pod.name, message))

    def cleared(self, queued: QueuedPod) -> None:
        self.log.append((queued.pod.name, "<cleared>"))


def queue_with(reports: Reports | None) -> SchedulingQueue:
    fw = framework()
    assert fw.plugins.queue_sort is not None
    return SchedulingQueue(
        FakeClock(),
        profiles={"usher": fw},
        sort_key=fw.plugins.queue_sort.sort_key,
        options=QueueOptions(),
        reporter=reports,
    )


def claim_pod(name: str, *, condition: tuple[str, str] | None = None, gates: bool = False) -> dict[str, Any]:
    builder = make_pod().name(name).uid(f"uid-{name}")
    if gates:
        builder.gates("g")
    pod = builder.obj()
    if not gates:
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "missing"}]
    if condition:
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": condition[0], "message": condition[1]}
        ]
    return pod


def test_a_new_rejection_is_reported_once() -> None:
    reports = Reports()
    queue = queue_with(reports)
    queue.add(PodInfo.from_api(claim_pod("p")))
    queue.move_all(NODE_ADD)  # re-evaluated, same message
    queue.flush()
    assert reports.log == [("p", 'resourceclaim.resource.k8s.io "missing" not found')]


def test_the_message_is_seeded_from_the_pod_so_a_restart_reports_nothing_new() -> None:
    reports = Reports()
    queue = queue_with(reports)
    message = 'resourceclaim.resource.k8s.io "missing" not found'
    queue.add(PodInfo.from_api(claim_pod("p", condition=("NotReadyForScheduling", message))))
    assert reports.log == []


def test_a_gated_pod_with_the_api_servers_condition_is_never_reported() -> None:
    reports = Reports()
    queue = queue_with(reports)
    queue.add(PodInfo.from_api(claim_pod("gated", gates=True, condition=("SchedulingGated", GATES))))
    assert reports.log == []


def test_passing_preenqueue_after_a_report_clears_it() -> None:
    reports = Reports()
    queue = queue_with(reports)
    old = PodInfo.from_api(claim_pod("g", gates=True))
    queue.add(old)
    new = PodInfo.from_api(make_pod().name("g").uid("uid-g").obj())
    queue.update(old, new, pod_update_events(old.raw, new.raw, assigned=False))
    assert reports.log == [("g", GATES), ("g", "<cleared>")]
    assert queue.get(PodKey("default/g")).last_rejection_message == ""  # type: ignore[union-attr]


def test_a_pod_that_never_was_rejected_is_never_cleared() -> None:
    reports = Reports()
    queue = queue_with(reports)
    queue.add(PodInfo.from_api(make_pod().name("fine").obj()))
    assert reports.log == []


def test_without_the_gate_nothing_is_reported() -> None:
    queue = queue_with(None)
    queue.add(PodInfo.from_api(claim_pod("p")))
    assert queue.pending()["gated"] == 1
