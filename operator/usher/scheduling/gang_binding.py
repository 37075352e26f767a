"""A gang's members between their pod-group cycle and their Bind calls: all of them reach Bind, or none does.

The pod-group cycle commits a gang's members together (each assumed,
reserved and allowed at Permit in the same cycle) and hands each to its own
binding cycle. Those run concurrently, so one member could fail (a PreBind
write refused, a Permit rejected, the pod deleted) while the others bind:
a partial gang holding its nodes. A ``GangCommit`` is the barrier between
PreBind and Bind that prevents it:

    Permit (all allowed together) -> PreBind -> ready() ... every member ready -> Bind
                                               \\-> fail(): every member not yet at Bind is rolled back

Each member's binding cycle calls ``ready`` once its Permit wait and PreBind
passed, and awaits the answer: Success once every member is ready, or the
rollback status (``Cause.GANG_ROLLED_BACK``) as soon as one member fails.
A failing member calls ``GangCommits.fail``, which also rejects the members
still waiting at Permit; a member deleted on the way is failed by the watch
(``GangCommits.gone``). Rolled-back members are unreserved, forgotten and
retried after their backoff, as a gang again.

A Bind call the API server refuses after the barrier cannot be undone for the
members already bound (a binding is final): that member alone is retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from usher.core.framework.names import GANG_SCHEDULING
from usher.core.types import SUCCESS, Cause, Code, PodGroupKey, PodKey, Status
from usher.scheduling.waiting_pods import WaitingPods


class GangCommit:
    """One committed gang on its way to Bind (see the module docstring)."""

    def __init__(self, group: PodGroupKey, members: Collection[PodKey]) -> None:
        self.group = group
        self.members = frozenset(members)
        self._ready: set[PodKey] = set()
        self._outcome: asyncio.Future[Status] = asyncio.get_running_loop().create_future()
        self.failed_member: PodKey | None = None
        """The member whose failure rolled the gang back (None while nothing failed)."""

    @property
    def decided(self) -> bool:
        """Every member was ready, or one failed: the barrier is down either way."""
        return self._outcome.done()

    def ready(self, key: PodKey) -> asyncio.Future[Status]:
        """``key`` passed Permit and PreBind; the future resolves with Success once every member has,
        or with the rollback status as soon as one member fails."""
        self._ready.add(key)
        if not self._outcome.done() and self._ready >= self.members:
            self._outcome.set_result(SUCCESS)
        return self._outcome

    def fail(self, key: PodKey, message: str) -> bool:
        """``key`` will not be bound: roll the gang back. False when the barrier was down already."""
        if self._outcome.done():
            return False
        self.failed_member = key
        self._outcome.set_result(self.rollback_status(key, message))
        return True

    def rollback_status(self, key: PodKey, message: str) -> Status:
        return Status(
            Code.UNSCHEDULABLE,
            (f"rolled back with its gang: pod {key} of pod group {self.group} was not bound: {message}",),
            GANG_SCHEDULING,
            Cause.GANG_ROLLED_BACK,
        )

    def on_decided(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the barrier is down."""
        self._outcome.add_done_callback(lambda _: callback())

    @property
    def outcome(self) -> Status | None:
        """The barrier's answer once decided."""
        return self._outcome.result() if self._outcome.done() else None


class GangCommits:
    """The gangs committed and not past their barrier yet, by member; rolls a gang back when one fails."""

    def __init__(self, waiting_pods: WaitingPods) -> None:
        self._waiting_pods = waiting_pods
        self._by_member: dict[PodKey, GangCommit] = {}

    def start(self, group: PodGroupKey, members: Collection[PodKey]) -> GangCommit:
        commit = GangCommit(group, members)
        for key in commit.members:
            self._by_member[key] = commit
        commit.on_decided(lambda: self._release(commit))
        return commit

    def fail(self, commit: GangCommit, key: PodKey, message: str) -> None:
        """``key`` of ``commit`` failed before Bind: every other member is rolled back, also those still
        waiting at Permit."""
        if not commit.fail(key, message):
            return
        status = commit.outcome
        assert status is not None
        for member in commit.members:
            if member != key:
                self._waiting_pods.reject(member, GANG_SCHEDULING, status.message)

    def gone(self, key: PodKey) -> None:
        """The pod was deleted: if it was a member on its way to Bind, its gang goes back (and so does it)."""
        commit = self._by_member.get(key)
        if commit is not None:
            self.fail(commit, key, "the pod was deleted")
            self._waiting_pods.reject(key, GANG_SCHEDULING, "the pod was deleted")

    def _release(self, commit: GangCommit) -> None:
        for key in commit.members:
            if self._by_member.get(key) is commit:
                del self._by_member[key]

    def __contains__(self, key: object) -> bool:
        return key in self._by_member
