"""The allocator's remembered first free devices change no outcome.

With ``use_versions``, a plain plan's descent starts from the free devices an earlier descent
found in a pool whose in-use version has not moved since. Random inventories (CEL errors,
counter-consuming devices, duplicate names, shared and zoned pools) and pods of one or two
claims follow one another while devices are taken as Reserve takes them and freed as
deallocations free them, slices and classes change now and then; every node's outcome must
be the one a search with nothing remembered finds.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.frameworks import FakeHandle
from tests.unit.dra.builders import DRIVER, make_claim, make_class, make_slice
from tests.unit.dra.test_batch_filter import CLASSES, _claim, _cluster, _device
from usher.core.dra.allocation import AllocationOutcome, Inventory, MatchMemo, allocate, plan_claims
from usher.core.dra.matching import SelectorResults
from usher.core.dra.model import Claim, parse_claim
from usher.core.dra.state import InFlight
from usher.core.types import PodKey


def _plain_claim(rnd: random.Random, name: str) -> dict[str, Any]:
    """Mostly plain requests (ExactCount, no adminAccess, no constraint), which the memory serves."""
    if rnd.random() < 0.25:
        return _claim(rnd, name)
    builder = make_claim().name(f"{name}-claim").uid(f"uid-{name}-claim").owner(f"uid-{name}")
    for r in range(rnd.choice([1, 1, 1, 2, 3])):
        builder.request(f"r{r}", rnd.choice(sorted(CLASSES)), count=rnd.choice([1, 1, 1, 2, 3]))
    return builder.obj()


def _seen(outcome: AllocationOutcome) -> tuple[Any, ...]:
    return outcome.ok, outcome.reason, outcome.error, dict(outcome.allocations)


def _define_classes(handle: FakeHandle, rnd: random.Random | None = None) -> None:
    for name, selectors in CLASSES.items():
        builder = make_class().name(name)
        for expression in selectors:
            builder.selector(expression)
        if rnd is not None and rnd.random() < 0.5:
            builder.selector(f'device.attributes["{DRIVER}"].numa == {rnd.randint(0, 1)}')
        handle.dra.on_class(False, builder.obj())


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_remembered_descent_finds_what_a_search_without_memory_finds(seed: int) -> None:
    rnd = random.Random(seed)
    handle = FakeHandle()
    dra = handle.dra
    _define_classes(handle)
    nodes, devices = _cluster(rnd, handle)
    for i, (pool, device, _) in enumerate(devices):
        if rnd.random() < 0.3:
            result = {"request": "r", "driver": DRIVER, "pool": pool, "device": device}
            dra.on_claim(False, make_claim().name(f"used-{i}").request("r", "gpu").allocated(result).obj())
    memo = MatchMemo()
    selectors = SelectorResults()
    inventory = Inventory.build(dra.slices.values())
    built_at = dra.slices_version
    reserved: list[str] = []
    for p in range(12):
        if dra.slices_version != built_at:
            inventory = Inventory.build(dra.slices.values())
            built_at = dra.slices_version
            memo.clear()  # as the plugin does with a new inventory
            selectors.forget_devices()
        claims: list[Claim] = [parse_claim(_plain_claim(rnd, f"p{p}"))]
        if rnd.random() < 0.3:
            claims.append(parse_claim(_plain_claim(rnd, f"p{p}b")))
        remembered = plan_claims(claims, dra.classes, memo=memo)
        in_use = dict(dra.in_use())
        chosen = None
        for node in rnd.sample(nodes, len(nodes)):
            expected = allocate(
                plan_claims(claims, dra.classes),
                node_name=node.name,
                node_labels=node.labels,
                inventory=inventory,
                in_use=in_use,
                evaluate=SelectorResults(),
            )
            outcome = allocate(
                remembered,
                node_name=node.name,
                node_labels=node.labels,
                inventory=inventory,
                in_use=in_use,
                evaluate=selectors,
                use_versions=dra.pool_use_versions,
                timeout=60.0 if p % 2 else None,
            )
            assert _seen(outcome) == _seen(expected), node.name
            if outcome.ok and chosen is None:
                chosen = outcome
        # As Reserve does: the chosen node's devices are in flight, so their pools change.
        if chosen is not None:
            for claim in claims:
                allocation = chosen.allocations[claim.uid]
                dra.add_in_flight(claim.key, InFlight(PodKey(f"ns/p{p}"), claim.uid, allocation, allocation.devices()))
                reserved.append(claim.key)
        # A deallocation frees devices; an earlier pod's claim may be given up.
        if reserved and rnd.random() < 0.3:
            dra.remove_in_flight(reserved.pop(rnd.randrange(len(reserved))))
        if devices and rnd.random() < 0.3:
            i = rnd.randrange(len(devices))
            if rnd.random() < 0.5:
                dra.on_claim(True, make_claim().name(f"used-{i}").obj())
            else:
                pool, device, _ = devices[i]
                result = {"request": "r", "driver": DRIVER, "pool": pool, "device": device}
                dra.on_claim(False, make_claim().name(f"used-{i}").request("r", "gpu").allocated(result).obj())
        if rnd.random() < 0.1:
            name = rnd.choice(nodes).name
            builder = make_slice().name(f"{name}-s0").driver(DRIVER).pool(name, count=1, generation=p + 2).node(name)
            for d in range(rnd.randint(0, 5)):
                builder.raw_device(_device(rnd, f"d0-{d}"))
            dra.on_slice(False, builder.obj())
        if rnd.random() < 0.1:
            _define_classes(handle, rnd)
