"""`usher explain`: why is this pod pending? Built from the live queue, cache and last attempt.

The scheduler serves this JSON at /debug/pods/<ns>/<name> (and a summary of
all queues at /debug/queue) when started with --enable-debug-endpoints; the
`usher explain NAMESPACE/POD` command fetches it from a running usher and
renders it for people.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from usher.core.dra.model import allocated_devices
from usher.core.dra.podclaims import resolve_pod_claims
from usher.core.dra.taints import kept_off_by_taints
from usher.core.podgroups import Member, PodGroup
from usher.core.queue import QueuedPod, Where
from usher.core.types import PodInfo, PodKey
from usher.core.volumes.podvolumes import pod_claim_refs
from usher.core.volumes.state import VolumeState

if TYPE_CHECKING:
    from usher.scheduling.scheduler import Scheduler

MAX_MEMBERS_EXPLAINED = 20
"""Members of a pod group listed one by one; the rest are counted."""


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
    group = pod_group_report(scheduler, queued.pod)
    if group is not None:
        report["podGroup"] = group
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
    taints = device_taints_of(scheduler, queued.pod)
    if taints:
        report["deviceTaints"] = taints
    report["requeuedBy"] = scheduler.queue.queueing_events_for(queued)
    if queued.where is Where.UNSCHEDULABLE:
        report["flushInSeconds"] = round(max(0.0, since + 300 - now), 3)
    return report


def device_taints_of(scheduler: Scheduler, pod: PodInfo) -> list[dict[str, str]]:
    """Devices the pod's unallocated ResourceClaims select but may not have: their taints are not tolerated."""
    dra = scheduler.dra
    claims = [dra.claim(f"{pod.namespace}/{c.claim_name}") for c in resolve_pod_claims(pod.raw).claims]
    return kept_off_by_taints((c for c in claims if c is not None), dra.slices.values(), dra.classes, dra.selectors)


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


def pod_group_report(scheduler: Scheduler, pod: PodInfo) -> dict[str, Any] | None:
    """The pod's gang: its policy, its members' states, and what it waits for (None: no pod group)."""
    groups = scheduler.cache.pod_groups
    key = pod.group_key
    if key is None or not groups.enabled:
        return None
    report: dict[str, Any] = {"name": key}
    state = groups.get(key)
    group = state.pod_group if state is not None else None
    if state is None or group is None:
        report["waitingFor"] = f"PodGroup {key} to be created"
        return report
    report["policy"] = group.policy
    if group.min_count is not None:
        report["minCount"] = group.min_count
    if group.topology_key:
        report["topologyKey"] = group.topology_key
    if group.disrupted_together:
        report["disruptionMode"] = "All"
    if group.claims:
        report["claims"] = _group_claims(scheduler, group)
    if group.workload is not None:
        workload = groups.workload(group.namespace, group.workload.workload)
        report["workload"] = {
            "name": f"{group.namespace}/{group.workload.workload}",
            "template": group.workload.template,
            **({"controller": workload.controller} if workload is not None and workload.controller else {}),
        }
    members: dict[str, str] = {}
    for member_key in sorted(state.members)[:MAX_MEMBERS_EXPLAINED]:
        queued = scheduler.queue.get(member_key)
        member = groups.member(member_key)
        members[member_key] = (
            state_of(queued) if queued is not None and member is Member.UNSCHEDULED else _MEMBER_STATES[member]
        )
    report["members"] = members
    report["membersLeftOut"] = max(0, state.all_count - len(members))
    report["known"] = state.all_count
    report["scheduled"] = state.scheduled_count
    if group.problem:
        report["waitingFor"] = group.problem
    elif group.min_count is not None and state.all_count < group.min_count:
        missing = group.min_count - state.all_count
        report["waitingFor"] = f"{missing} more pod{'s' if missing != 1 else ''} of PodGroup {key}"
    condition = group.condition()
    if condition is not None:
        report["condition"] = {k: condition.get(k) for k in ("type", "status", "reason", "message")}
    return report


_MEMBER_STATES = {Member.UNSCHEDULED: "pending", Member.ASSUMED: "assumed", Member.ASSIGNED: "bound", None: "unknown"}


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
    if "podGroup" in report:
        lines.extend(_render_pod_group(report["podGroup"]))
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
    for kept in report.get("deviceTaints", []):
        lines.append(
            f"  device {kept['device']} has taint {kept['taint']}, not tolerated by claim {kept['claim']} "
            f"request {kept['request']}"
        )
    if report.get("requeuedBy"):
        lines.append(f"  retried when: {', '.join(report['requeuedBy'])}")
    if "flushInSeconds" in report:
        lines.append(f"  retried anyway in {report['flushInSeconds']}s (the 5-minute flush)")
    return "\n".join(lines)


def _group_claims(scheduler: Scheduler, group: PodGroup) -> list[dict[str, str]]:
    """The PodGroup's shared claims (DRAWorkloadResourceClaims): which claim each is and where it stands."""
    dra = scheduler.dra
    claims = []
    for group_claim in group.claims:
        name = group.resolved_claim(group_claim)
        claim = dra.claim(f"{group.namespace}/{name}") if name else None
        if name is None:
            state = f"not created yet from template {group_claim.template_name}"
        elif claim is None:
            state = "not found"
        elif claim.allocation is not None:
            held = "reserved for the PodGroup" if group.uid in claim.reserved_for else "not reserved for the PodGroup"
            state = f"allocated ({len(allocated_devices(claim))} device(s)), {held}"
        elif f"{group.namespace}/{name}" in dra.in_flight:
            state = "allocation chosen, being written"
        else:
            state = "not allocated"
        claims.append({"name": group_claim.name, "claim": name or "", "state": state})
    return claims


def _render_pod_group(group: dict[str, Any]) -> list[str]:
    if "policy" not in group:
        return [f"  pod group {group['name']}: waiting for {group['waitingFor']}"]
    policy = f"gang, minCount {group['minCount']}" if "minCount" in group else group["policy"]
    if "topologyKey" in group:
        policy += f", all in one domain of {group['topologyKey']}"
    if "disruptionMode" in group:
        policy += ", preempted as a whole"
    workload = group.get("workload")
    if workload:
        policy += f"; Workload {workload['name']} template {workload['template']}"
        if workload.get("controller"):
            policy += f", controlled by {workload['controller']}"
    lines = [f"  pod group {group['name']} ({policy}): {group['known']} pod(s) known, {group['scheduled']} scheduled"]
    if "waitingFor" in group:
        lines.append(f"    waiting for {group['waitingFor']}")
    for claim in group.get("claims", ()):
        named = f" -> {claim['claim']}" if claim["claim"] else ""
        lines.append(f"    shared claim {claim['name']}{named}: {claim['state']}")
    members = ", ".join(f"{key.split('/', 1)[-1]} {state}" for key, state in group["members"].items())
    more = f" and {group['membersLeftOut']} more" if group["membersLeftOut"] else ""
    lines.append(f"    members: {members}{more}")
    condition = group.get("condition")
    if condition:
        lines.append(
            f"    {condition['type']}: {condition['status']} ({condition['reason']}): {condition['message'] or '-'}"
        )
    return lines
