"""Watch events reach the right place: the cache for assigned pods, the queue for ours, events for the rest."""

from __future__ import annotations

import copy

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import scheduling_queue
from tests.unit.dra.builders import make_slice
from usher.core.cache import Cache
from usher.core.clock import FakeClock
from usher.core.handling import EventHandlers
from usher.core.queue import Where
from usher.core.types import NodeName, PodKey, pod_key


@pytest.fixture
def handlers() -> EventHandlers:
    return EventHandlers(Cache(), scheduling_queue(FakeClock()), {"usher"})


def test_our_unscheduled_pod_is_queued(handlers: EventHandlers) -> None:
    assert handlers.on_pod("ADDED", make_pod().name("a").obj()) == "PodAdd"
    assert handlers.queue.pending()["active"] == 1


def test_another_schedulers_pod_is_ignored(handlers: EventHandlers) -> None:
    handlers.on_pod("ADDED", make_pod().scheduler("default-scheduler").obj())
    assert len(handlers.queue) == 0


def test_an_assigned_pod_of_any_scheduler_is_counted(handlers: EventHandlers) -> None:
    handlers.on_node("ADDED", make_node().name("n").obj())
    label = handlers.on_pod("ADDED", make_pod().scheduler("default-scheduler").node("n").req(cpu="1").obj())
    assert label == "AssignedPodAdd"
    assert handlers.cache.node("n").requested["cpu"] == 1000  # type: ignore[union-attr]


def test_a_pod_bound_leaves_the_queue_and_is_counted(handlers: EventHandlers) -> None:
    pod = make_pod().name("a")
    handlers.on_pod("ADDED", pod.obj())
    handlers.on_pod("MODIFIED", pod.node("n").version().obj())
    assert len(handlers.queue) == 0
    assert handlers.cache.node_of(pod_key("default", "a")) == "n"


def test_a_deleted_pod_leaves_everything(handlers: EventHandlers) -> None:
    pod = make_pod().name("a")
    handlers.on_pod("ADDED", pod.obj())
    assert handlers.on_pod("DELETED", pod.version().obj()) == "UnscheduledPodDelete"
    assert len(handlers.queue) == 0


def test_a_recreated_pods_add_before_its_predecessors_delete_replaces_it(handlers: EventHandlers) -> None:
    """kopf orders events per UID, not per name: the successor's ADDED may come first."""
    handlers.on_node("ADDED", make_node().name("n").obj())
    earlier = make_pod().name("a").node("n").req(cpu="1").version("10")
    handlers.on_pod("ADDED", earlier.obj())
    later = make_pod().name("a").req(cpu="1").version("20")
    assert handlers.on_pod("ADDED", later.obj()) == "PodAdd"
    assert handlers.cache.node("n").requested["cpu"] == 0  # type: ignore[union-attr]
    queued = handlers.queue.get(pod_key("default", "a"))
    assert queued is not None and queued.pod.uid == later.obj()["metadata"]["uid"]
    # The earlier pod's own events, delivered late, change nothing.
    assert handlers.is_stale(earlier.version("15").obj())
    assert handlers.on_pod("DELETED", earlier.obj()) == ""
    assert handlers.on_pod("MODIFIED", earlier.obj()) == ""
    assert handlers.queue.get(pod_key("default", "a")) is queued
    assert handlers.cache.node("n").requested["cpu"] == 0  # type: ignore[union-attr]


def test_a_recreated_pod_replaces_its_assumed_predecessor(handlers: EventHandlers) -> None:
    handlers.on_node("ADDED", make_node().name("n").obj())
    earlier = make_pod().name("a").req(cpu="1").version("10")
    handlers.on_pod("ADDED", earlier.obj())
    queued = handlers.queue.pop()
    assert queued is not None
    handlers.cache.assume(queued.pod, NodeName("n"))  # its binding is in flight
    later = make_pod().name("a").req(cpu="1").version("20")
    handlers.on_pod("ADDED", later.obj())
    assert handlers.cache.node("n").requested["cpu"] == 0  # type: ignore[union-attr]
    assert not handlers.cache.is_assumed(queued.key)
    handlers.queue.done(queued)  # the earlier binding's 409 arrives: the successor stays queued
    successor = handlers.queue.get(queued.key)
    assert successor is not None and successor.pod.uid == later.obj()["metadata"]["uid"]
    assert handlers.queue.pending()["active"] == 1


def test_without_numeric_resource_versions_the_later_event_wins(handlers: EventHandlers) -> None:
    earlier = make_pod().name("a").version("x")
    handlers.on_pod("ADDED", earlier.obj())
    later = make_pod().name("a").version("y")
    assert not handlers.is_stale(later.obj())
    handlers.on_pod("ADDED", later.obj())
    queued = handlers.queue.get(pod_key("default", "a"))
    assert queued is not None and queued.pod.uid == later.obj()["metadata"]["uid"]


def test_a_terminal_pod_frees_its_node_and_raises_assigned_pod_delete(handlers: EventHandlers) -> None:
    handlers.on_node("ADDED", make_node().name("n").obj())
    running = make_pod().name("a").node("n").req(cpu="1")
    handlers.on_pod("ADDED", running.obj())
    assert handlers.on_pod("MODIFIED", running.phase("Succeeded").version().obj()) == "AssignedPodDelete"
    assert handlers.cache.node("n").requested["cpu"] == 0  # type: ignore[union-attr]


def test_a_malformed_pod_is_reported_not_raised(handlers: EventHandlers) -> None:
    bad = make_pod().name("bad").req(cpu="lots").obj()
    handlers.on_pod("ADDED", bad)
    assert len(handlers.queue) == 0
    assert [m.pod["metadata"]["name"] for m in handlers.malformed] == ["bad"]
    assert "invalid quantity 'lots'" in handlers.malformed[0].message


@pytest.mark.parametrize(
    ("quantity", "message"),
    [
        pytest.param("1e999999", "quantity '1e999999' is out of range", id="an exponent past any int64"),
        pytest.param("1e2147483648", "exponent out of range", id="an exponent past int32"),
        pytest.param("9223372036854775808", "out of range", id="2 to the 63"),
    ],
)
def test_a_pod_asking_for_more_than_kube_scheduler_counts_is_reported_not_raised(
    handlers: EventHandlers, quantity: str, message: str
) -> None:
    handlers.on_pod("ADDED", make_pod().name("huge").req(memory=quantity).obj())
    assert len(handlers.queue) == 0
    assert [m.pod["metadata"]["name"] for m in handlers.malformed] == ["huge"]
    assert message in handlers.malformed[0].message


def test_a_node_entry_usher_cannot_count_is_left_out_and_the_rest_applies(
    handlers: EventHandlers, caplog: pytest.LogCaptureFixture
) -> None:
    node = make_node().name("n").capacity(cpu="4", memory="1e999999", pods="110").obj()
    assert handlers.on_node("ADDED", node) == "NodeAdd"
    info = handlers.cache.node("n")
    assert info is not None and info.allocatable == {"cpu": 4000, "pods": 110}
    assert "node n: allocatable left out: memory: quantity '1e999999' is out of range" in caplog.text
    caplog.clear()
    cordoned = copy.deepcopy(node)
    cordoned["spec"]["unschedulable"] = True
    handlers.on_node("MODIFIED", cordoned)
    assert handlers.cache.node("n").unschedulable  # type: ignore[union-attr]
    assert caplog.text == "", "logged again only when what is left out changes"
    handlers.on_node("MODIFIED", make_node().name("n").capacity(cpu="4", memory="8Gi").obj())
    assert handlers.cache.node("n").allocatable == {"cpu": 4000, "memory": 8 * 2**30}  # type: ignore[union-attr]


def test_a_slice_with_a_capacity_of_any_size_is_taken_or_recorded_broken_never_raised(
    handlers: EventHandlers,
) -> None:
    for name, value in (("large", "1e99999"), ("huge", "1e999999"), ("beyond", "1e2147483648")):
        raw = make_slice().name(name).node("n").device("d", capacity={"example.com/memory": value}).obj()
        handlers.on_dra("resourceslices", "ADDED", raw)
    assert "large" in handlers.dra.slices, "beyond int64 is a quantity all the same (Go's ParseQuantity takes it)"
    assert "out of range: more than 100000 digits" in handlers.dra.broken["slice/huge"]
    assert "exponent out of range" in handlers.dra.broken["slice/beyond"]


def test_a_redelivered_version_changes_nothing(handlers: EventHandlers) -> None:
    pod = make_pod().name("a").version("7").obj()
    handlers.on_pod("ADDED", pod)
    assert handlers.queue.pop() is not None
    assert handlers.on_pod("MODIFIED", pod) == ""
    assert handlers.queue.pop() is None


def test_node_heartbeats_requeue_nothing_but_a_bigger_node_does(handlers: EventHandlers) -> None:
    handlers.on_node("ADDED", make_node().name("n").capacity(cpu="1", memory="1Gi", pods=10).obj())
    handlers.on_pod("ADDED", make_pod().name("a").req(cpu="2").obj())
    queued = handlers.queue.pop()
    assert queued is not None
    handlers.queue.add_unschedulable(queued, unschedulable_plugins=["NodeResourcesFit"])
    heartbeat = make_node().name("n").capacity(cpu="1", memory="1Gi", pods=10).condition("Ready", "True", "t2").obj()
    handlers.on_node("MODIFIED", heartbeat)
    assert handlers.queue.pending()["unschedulable"] == 1
    grown = make_node().name("n").capacity(cpu="64", memory="1Ti", pods=110).obj()
    handlers.on_node("MODIFIED", grown)
    key = PodKey("default/a")
    assert handlers.queue.get(key) is not None
    assert handlers.queue.get(key).where in (Where.ACTIVE, Where.BACKOFF)  # type: ignore[union-attr]


def test_removing_the_gates_of_a_queued_pod_activates_it(handlers: EventHandlers) -> None:
    gated = make_pod().name("a").gates("g")
    handlers.on_pod("ADDED", gated.obj())
    assert handlers.queue.pending()["gated"] == 1
    ungated = make_pod().name("a").uid(gated.obj()["metadata"]["uid"]).version().obj()
    assert handlers.on_pod("MODIFIED", ungated) == "UnscheduledPodUpdate"
    assert handlers.queue.pending() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 0}


def test_a_late_unbound_update_of_an_assumed_pod_does_not_queue_it_again(handlers: EventHandlers) -> None:
    handlers.on_node("ADDED", make_node().name("n").obj())
    pod = make_pod().name("a")
    handlers.on_pod("ADDED", pod.obj())
    queued = handlers.queue.pop()
    assert queued is not None
    handlers.cache.assume(queued.pod, queued.pod.node_name or "n")  # type: ignore[arg-type]
    handlers.queue.done(queued)
    # kube-controller-manager (or our own status patch) updates the pod before the watch shows the binding.
    assert handlers.on_pod("MODIFIED", pod.version().obj()) == ""
    assert len(handlers.queue) == 0, "never queued twice while its binding is on the way"
    handlers.on_pod("MODIFIED", pod.node("n").version().obj())
    assert handlers.cache.node("n").requested["pods"] == 1  # type: ignore[union-attr]


def _spread_pod(name: str) -> dict[str, object]:
    obj = make_pod().name(name).obj()
    obj["metadata"]["labels"] = {"app": "web"}
    obj["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    return obj


@pytest.mark.parametrize(
    ("zone_label", "released"),
    [
        pytest.param(True, True, id="deleting a node in a topology domain releases a pod PodTopologySpread rejected"),
        pytest.param(False, False, id="deleting a node outside every topology domain releases nothing"),
    ],
)
def test_a_node_deletion_is_offered_to_pods_rejected_by_pod_topology_spread(
    handlers: EventHandlers, zone_label: bool, released: bool
) -> None:
    node = make_node().name("gone")
    if zone_label:
        node.label("zone", "z1")
    handlers.on_node("ADDED", node.obj())
    handlers.on_pod("ADDED", _spread_pod("a"))
    queued = handlers.queue.pop()
    assert queued is not None
    handlers.queue.add_unschedulable(queued, unschedulable_plugins=["PodTopologySpread"])
    assert handlers.queue.pending()["unschedulable"] == 1

    assert handlers.on_node("DELETED", node.obj()) == "NodeDelete"

    assert handlers.cache.node("gone") is None
    where = handlers.queue.get(PodKey("default/a")).where  # type: ignore[union-attr]
    if released:
        assert where in (Where.ACTIVE, Where.BACKOFF)
        assert handlers.queue.get(PodKey("default/a")).last_event == "NodeDelete"  # type: ignore[union-attr]
    else:
        assert where is Where.UNSCHEDULABLE


@pytest.mark.parametrize(
    ("watch_event", "counted_after"),
    [
        pytest.param("bound", 1, id="counted until the watch shows it bound, then once"),
        pytest.param("deleted", 0, id="counted until the watch shows it deleted, then not at all"),
    ],
)
def test_an_assumed_pod_counts_on_its_node_however_late_the_watch_is(watch_event: str, counted_after: int) -> None:
    clock = FakeClock()
    handlers = EventHandlers(Cache(), scheduling_queue(clock), {"usher"})
    handlers.on_node("ADDED", make_node().name("n").obj())
    pod = make_pod().name("a")
    handlers.on_pod("ADDED", pod.obj())
    queued = handlers.queue.pop()
    assert queued is not None
    handlers.cache.assume(queued.pod, "n")  # type: ignore[arg-type]
    handlers.queue.done(queued)  # the binding call returned

    clock.advance(3600)  # the watch lags an hour behind; the loop keeps flushing meanwhile
    handlers.queue.flush()

    assert handlers.cache.node("n").requested["pods"] == 1, "an under-counted node would take one pod too many"  # type: ignore[union-attr]
    assert handlers.cache.is_assumed(queued.key)
    if watch_event == "bound":
        handlers.on_pod("MODIFIED", pod.node("n").version().obj())
    else:
        handlers.on_pod("DELETED", pod.obj())
    assert not handlers.cache.is_assumed(queued.key)
    assert handlers.cache.node("n").requested["pods"] == counted_after  # type: ignore[union-attr]


def test_disruption_budgets_are_kept_per_namespace_for_preemption(handlers: EventHandlers) -> None:
    budget = {
        "metadata": {"namespace": "team", "name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1, "disruptedPods": {"web-0": "2026-11-24T12:00:00Z"}},
    }
    handlers.on_disruption_budget("ADDED", budget)
    [kept] = handlers.cache.disruption_budgets("team")
    assert (kept.disruptions_allowed, kept.disrupted_pods) == (1, frozenset({"web-0"}))
    assert kept.selects({"app": "web"}) and not kept.selects({"app": "db"})
    assert handlers.cache.disruption_budgets("other") == []
    handlers.on_disruption_budget("DELETED", budget)
    assert handlers.cache.disruption_budgets("team") == []


def test_a_budget_with_an_empty_selector_selects_no_pod() -> None:
    from usher.core.cache import DisruptionBudget

    empty = DisruptionBudget.from_api({"metadata": {"name": "all"}, "spec": {"selector": {}}})
    assert not empty.selects({"app": "web"}) and not empty.selects({})


def test_an_assigned_pod_resized_down_retries_a_pod_waiting_for_room_and_a_status_update_does_not() -> None:
    """AssignedPodUpdatePodScaleDown from the requests the handlers already parsed, not parsed again."""
    from tests.unit.test_queue import Recorder

    recorder = Recorder()
    handlers = EventHandlers(Cache(), scheduling_queue(FakeClock(), recorder=recorder), {"usher"})
    handlers.on_node("ADDED", make_node().name("n").capacity(cpu="2").obj())
    big = make_pod().name("big").node("n").req(cpu="1500m").version("1")
    handlers.on_pod("ADDED", big.obj())
    handlers.on_pod("ADDED", make_pod().name("waiting").req(cpu="1").obj())
    queued = handlers.queue.pop()
    assert queued is not None
    handlers.queue.add_unschedulable(queued, unschedulable_plugins=["NodeResourcesFit"])
    running = big.version("2").obj()
    running["status"]["phase"] = "Running"
    assert handlers.on_pod("MODIFIED", running) == "AssignedPodUpdate"
    assert handlers.queue.get(PodKey("default/waiting")).where is Where.UNSCHEDULABLE  # type: ignore[union-attr]
    resized = copy.deepcopy(running)
    resized["metadata"]["resourceVersion"] = "3"
    resized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    assert handlers.on_pod("MODIFIED", resized) == "AssignedPodUpdate"
    assert ("NodeResourcesFit", "AssignedPodUpdatePodScaleDown", "Queue") in recorder.hints
    assert handlers.queue.get(PodKey("default/waiting")).where is not Where.UNSCHEDULABLE  # type: ignore[union-attr]
