"""`usher explain`: why is this pod pending? Built from the live queue, cache and last attempt.

The scheduler serves this JSON at /debug/pods/<ns>/<name> (and a summary of
all queues at /debug/queue) when started with --enable-debug-endpoints; the
`usher explain NAMESPACE/POD` command fetches it from a running usher and
renders it for people.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from usher.core.queue import QueuedPod, Where
from usher.core.types import PodInfo, PodKey
from usher.core.volumes.podvolumes import pod_claim_refs
from usher.core.volumes.state import VolumeState

if TYPE_CHECKING:
    from usher.scheduling.scheduler import Scheduler


def state_of(queued: QueuedPod) -> str:
    """Where a pod waits, as users say it: gated pods apart from the rest of the pool."""
    return "gated" if queued.gated and queued.where is Where.UNSCHEDULABLE else queued.where.value


def explain(scheduler: Scheduler, key: PodKey) -> dict[str, Any]:
    now = scheduler.clock.now()
    report: dict[str, Any] = {"pod": key}
    queued = scheduler.queue.get(key)
    if queued is None:
        node = scheduler.cache.node_of(key)
        if node is not None:
            report["state"] = "assumed" if scheduler.cache.is_assumed(key) else "bound"
            report["node"] = node
        else:
            report["state"] = "unknown"
            report["hint"] = (
                "usher does not hold this pod: it does not exist, its spec.schedulerName is not one of "
                f"{sorted(scheduler.frameworks)}, or it is already bound"
            )
        return report
    report["state"] = state_of(queued)
    report["profile"] = queued.pod.scheduler_name
    report["attempts"] = queued.attempts
    report["lastMovedBy"] = queued.last_event
    since = queued.pool_since if queued.where is Where.UNSCHEDULABLE else queued.timestamp
    report["secondsInState"] = round(max(0.0, now - since), 3)
    if queued.initial_attempt_timestamp is not None:
        report["secondsSinceFirstAttempt"] = round(now - queued.initial_attempt_timestamp, 3)
    if queued.where is Where.BACKOFF:
        report["backoffExpiresInSeconds"] = round(max(0.0, queued.backoff_expiry - now), 3)
    if queued.gated:
        report["rejectedBy"] = [{"plugin": queued.gating_plugin, "messages": [queued.gating_message]}]
    nominated = scheduler.queue.nominator.node_of(key)
    if nominated is not None:
        report["nominatedNode"] = nominated
        report["waitingForVictims"] = scheduler.evictions.victims_of(queued.pod.uid)
    attempt = scheduler.attempts.last(key)
    if attempt is not None:
        if not queued.gated:
            report["rejectedBy"] = [{"plugin": p, "messages": m} for p, m in attempt.plugins.items()]
        report["lastAttempt"] = {
            "secondsAgo": round(now - attempt.at, 3),
            "result": attempt.result,
            "message": attempt.message,
            "nodes": attempt.nodes,
            "nodesLeftOut": attempt.nodes_left_out,
        }
    claims = claims_of(scheduler.volumes, queued.pod)
    if claims:
        report["claims"] = claims
    report["requeuedBy"] = scheduler.queue.queueing_events_for(queued)
    if queued.where is Where.UNSCHEDULABLE:
        report["flushInSeconds"] = round(max(0.0, since + 300 - now), 3)
    return report


def claims_of(volumes: VolumeState, pod: PodInfo) -> list[dict[str, str]]:
    """Each PersistentVolumeClaim the pod uses and where it stands, as usher's volume state has it."""
    claims = []
    for ref in pod_claim_refs(pod.raw):
        key = f"{pod.namespace}/{ref.claim}"
        claim = volumes.claim(key)
        if claim is None:
            broken = volumes.broken.get(f"persistentvolumeclaims/{key}")
            if broken:
                state = f"cannot be read: {broken}"
            elif ref.ephemeral:
                state = "not created yet (kube-controller-manager's ephemeral-volume controller makes it)"
            else:
                state = "does not exist"
        elif claim.deleting:
            state = "being deleted"
        elif claim.fully_bound:
            state = f"bound to PersistentVolume {claim.volume_name}"
        elif claim.selected_node:
            state = f"selected node {claim.selected_node}: waiting for the provisioner and the PV controller"
        else:
            storage_class = volumes.classes.get(claim.class_name)
            if storage_class is not None and storage_class.delays_binding:
                state = f"unbound, class {claim.class_name} binds when a node is chosen (WaitForFirstConsumer)"
            else:
                state = (
                    f"unbound, class {claim.class_name or '(none)'} binds immediately: waiting for the PV controller"
                )
        claims.append({"volume": ref.volume, "claim": ref.claim, "state": state})
    return claims


def queue_summary(scheduler: Scheduler) -> dict[str, Any]:
    pods = scheduler.queue.pods()
    states: Counter[str] = Counter()
    plugins: Counter[str] = Counter()
    for queued in pods:
        states[state_of(queued)] += 1
        for plugin in {queued.gating_plugin} if queued.gated else queued.rejectors:
            plugins[plugin] += 1
    return {
        "pending": scheduler.queue.pending(),
        "states": dict(states),
        "heldBackByPlugin": dict(plugins.most_common()),
        "inFlightEvents": dict(scheduler.queue.in_flight_event_counts()),
        "nodes": scheduler.cache.node_count,
        "profiles": sorted(scheduler.frameworks),
    }


def render(report: dict[str, Any]) -> str:
    """The report for people, in the order a user asks questions."""
    lines = [f"Pod {report['pod']}: {report['state']}"]
    if report["state"] in ("bound", "assumed"):
        lines.append(
            f"  on node {report['node']}"
            + (" (binding not yet confirmed by the watch)" if report["state"] == "assumed" else "")
        )
        return "\n".join(lines)
    if report["state"] == "unknown":
        lines.append(f"  {report['hint']}")
        return "\n".join(lines)
    lines.append(
        f"  profile {report['profile']}, {report['attempts']} attempt(s), {report['secondsInState']}s in this state"
        f" (last moved by {report['lastMovedBy'] or '-'})"
    )
    if "backoffExpiresInSeconds" in report:
        lines.append(f"  backing off: retried in {report['backoffExpiresInSeconds']}s")
    if "nominatedNode" in report:
        victims = report["waitingForVictims"]
        waiting = f"; waiting for its victims to go: {', '.join(victims)}" if victims else ""
        lines.append(f"  nominated to node {report['nominatedNode']} (preemption made room there){waiting}")
    for rejection in report.get("rejectedBy", []):
        messages = "; ".join(m for m in rejection["messages"] if m) or "(no message)"
        lines.append(f"  held back by {rejection['plugin']}: {messages}")
    attempt = report.get("lastAttempt")
    if attempt:
        lines.append(f"  last attempt {attempt['secondsAgo']}s ago ({attempt['result']}): {attempt['message']}")
        for node, reason in attempt["nodes"].items():
            lines.append(f"    {node}: {reason}")
        if attempt["nodesLeftOut"]:
            lines.append(f"    ... and {attempt['nodesLeftOut']} more node(s)")
    for claim in report.get("claims", []):
        lines.append(f"  volume {claim['volume']}: claim {claim['claim']} {claim['state']}")
    if report.get("requeuedBy"):
        lines.append(f"  retried when: {', '.join(report['requeuedBy'])}")
    if "flushInSeconds" in report:
        lines.append(f"  retried anyway in {report['flushInSeconds']}s (the 5-minute flush)")
    return "\n".join(lines)
