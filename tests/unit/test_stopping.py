"""The shutdown order that fences every write (usher.scheduling.stopping), on fakes, with grace periods that end
when the test says so."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from usher.scheduling.stopping import settle_bindings, stop_writing


class Timers:
    """``sleep`` whose grace periods end only when ``expire`` is called."""

    def __init__(self) -> None:
        self.expired = asyncio.Event()
        self.asked: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)
        await self.expired.wait()

    def expire(self) -> None:
        self.expired.set()


class Journal:
    """What happened, in order: the dispatcher's drain and halt, the Lease's release, the bindings' ends."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.drain = asyncio.Event()

    async def drained(self) -> None:
        await self.drain.wait()
        self.steps.append("drained")

    def halt(self) -> None:
        self.steps.append("halted")

    async def release(self) -> None:
        self.steps.append("released")


def binding(journal: Journal, name: str, finish: asyncio.Event) -> asyncio.Task[None]:
    async def cycle() -> None:
        try:
            await finish.wait()
            journal.steps.append(f"{name} bound")
        except asyncio.CancelledError:
            journal.steps.append(f"{name} rolled back")
            raise

    return asyncio.ensure_future(cycle())


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


async def test_bindings_finish_then_the_dispatcher_drains_halts_and_only_then_the_lease_is_released() -> None:
    journal, timers, finish = Journal(), Timers(), asyncio.Event()
    tasks = [binding(journal, "a", finish), binding(journal, "b", finish)]
    stopping = asyncio.ensure_future(
        stop_writing(bindings=tasks, writes=journal, lease=journal, lost=False, sleep=timers.sleep)
    )
    await until(lambda: bool(timers.asked))
    assert journal.steps == [], "nothing drains or is released while bindings are in flight"
    finish.set()
    await until(lambda: len(journal.steps) == 2)
    assert journal.steps == ["a bound", "b bound"]
    journal.drain.set()
    assert await stopping is True
    assert journal.steps == ["a bound", "b bound", "drained", "halted", "released"]


async def test_bindings_still_running_after_the_grace_are_cancelled_and_their_rollbacks_drained_first() -> None:
    journal, timers = Journal(), Timers()
    tasks = [binding(journal, "slow", asyncio.Event())]
    journal.drain.set()
    stopping = asyncio.ensure_future(
        stop_writing(bindings=tasks, writes=journal, lease=journal, lost=False, binding_grace=5, sleep=timers.sleep)
    )
    await until(lambda: timers.asked == [5])
    timers.expire()
    assert await stopping is True
    assert journal.steps == ["slow rolled back", "drained", "halted", "released"]


async def test_a_dispatcher_that_does_not_drain_keeps_the_lease_from_being_released() -> None:
    """Some write may still be in flight: a follower must wait out the lease duration, as after a crash."""
    journal, timers = Journal(), Timers()
    stopping = asyncio.ensure_future(
        stop_writing(bindings=[], writes=journal, lease=journal, lost=False, drain_timeout=5, sleep=timers.sleep)
    )
    await until(lambda: timers.asked == [5])
    timers.expire()
    assert await stopping is False
    assert journal.steps == ["halted"]


async def test_a_lost_lease_halts_at_once_and_cancels_bindings_without_draining() -> None:
    journal, timers = Journal(), Timers()
    tasks = [binding(journal, "a", asyncio.Event())]
    await asyncio.sleep(0)  # the cycle is waiting
    assert await stop_writing(bindings=tasks, writes=journal, lease=journal, lost=True, sleep=timers.sleep) is False
    assert journal.steps == ["halted", "a rolled back"]
    assert timers.asked == [], "no grace period: the renew deadline has passed"


async def test_without_leader_election_the_dispatcher_still_drains_before_it_halts() -> None:
    journal, timers = Journal(), Timers()
    journal.drain.set()
    assert await stop_writing(bindings=[], writes=journal, lease=None, lost=False, sleep=timers.sleep) is False
    assert journal.steps == ["drained", "halted"]


@pytest.mark.parametrize("done", [True, False])
async def test_settle_bindings_says_whether_every_cycle_finished_on_its_own(done: bool) -> None:
    journal, timers, finish = Journal(), Timers(), asyncio.Event()
    tasks = [binding(journal, "a", finish)]
    settling: Awaitable[bool] = asyncio.ensure_future(settle_bindings(tasks, 5, timers.sleep))
    await until(lambda: bool(timers.asked))
    if done:
        finish.set()
    else:
        timers.expire()
    assert await settling is done
    assert journal.steps == (["a bound"] if done else ["a rolled back"])
