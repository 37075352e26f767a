"""Creating a pod's extended-resource claim: a retried create never leaves two claims.

The real ``DispatcherClaimWriter`` over the real dispatcher (which retries a
POST on a lost answer: a connection reset, a 5xx), against a scripted
ResourceClaim API that stores every create it receives and then loses the
answer of the first ones, as a proxy or a timeout does. kube-scheduler's
``generateName`` would make a claim per attempt there; the writer names the
claim once per create, so the retry meets the claim the lost attempt made.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from usher.adapters.claims import DispatcherClaimWriter, generated_name
from usher.adapters.dispatching import Dispatcher
from usher.adapters.kubeapi import ApiResult
from usher.core.dra.extended import ExtendedRequest, claim_object
from usher.core.dra.model import FINALIZER

PREFIX = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
CONNECTION_RESET = 0
"""A lost answer by a connection reset (``aiohttp.ServerDisconnectedError``) rather than an HTTP status."""


@dataclass
class LossyClaimApi:
    """ResourceClaims as the API server keeps them: a create is stored (its name generated from ``generateName``
    when it has none; 409 AlreadyExists when taken), then the i-th create's answer is lost as ``lost[i]`` says
    while the list lasts (a 5xx status, or `CONNECTION_RESET`)."""

    lost: list[int] = field(default_factory=list)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = "") -> ApiResult:
        self.calls.append((method, path))
        if method == "GET":
            stored = self.claims.get(path.rsplit("/", 1)[1])
            return ApiResult(200, stored) if stored else ApiResult(404, {"reason": "NotFound"})
        assert (method, path) == ("POST", PREFIX)
        claim = copy.deepcopy(body)
        meta = claim["metadata"]
        name = meta.get("name") or f"{meta['generateName']}{len(self.claims):05d}"
        if name in self.claims:
            answer = ApiResult(409, {"reason": "AlreadyExists", "message": f'resourceclaims "{name}" already exists'})
        else:
            meta.update(name=name, uid=f"uid-{len(self.claims)}", resourceVersion="1")
            self.claims[name] = claim
            answer = ApiResult(201, claim)
        if self.lost:
            status = self.lost.pop(0)
            if status == CONNECTION_RESET:
                raise aiohttp.ServerDisconnectedError()
            return ApiResult(status, {"message": "the answer was lost"})
        return answer


async def no_sleep(seconds: float) -> None:
    pass


def claim_to_create() -> dict[str, Any]:
    """A pod's extended-resource claim as DynamicResources' PreBind hands it to ``create``: no name or UID, the
    finalizer on."""
    pod = {"metadata": {"name": "pod", "namespace": "ns", "uid": "pod-uid"}}
    claim = claim_object(pod, [ExtendedRequest("container-0-request-0", "gpu.example.com", 1)])
    del claim["metadata"]["name"], claim["metadata"]["uid"]
    claim["metadata"]["finalizers"] = [FINALIZER]
    return claim


async def create(api: LossyClaimApi, claim: dict[str, Any], seed: int = 7) -> ApiResult:
    dispatcher = Dispatcher(api, sleep=no_sleep)  # type: ignore[arg-type]
    dispatcher.start()
    try:
        result = await DispatcherClaimWriter(dispatcher, api, rng=random.Random(seed)).create(claim)  # type: ignore[arg-type]
    finally:
        await dispatcher.stop()
    return ApiResult(result.status, result.body)


@pytest.mark.parametrize(
    "lost",
    [
        pytest.param([CONNECTION_RESET], id="a connection reset after the write"),
        pytest.param([504], id="a gateway timeout after the write"),
        pytest.param([503, CONNECTION_RESET], id="two answers lost in a row"),
    ],
)
async def test_a_create_whose_answer_is_lost_leaves_one_claim_and_answers_with_it(lost: list[int]) -> None:
    api = LossyClaimApi(lost=list(lost))
    result = await create(api, claim_to_create())
    assert [method for method, _ in api.calls].count("POST") == len(lost) + 1, "retried until answered"
    [(name, stored)] = api.claims.items()
    assert result.ok and result.body == stored
    assert name.startswith("pod-extended-resources-") and len(name) == len("pod-extended-resources-") + 5


def test_the_name_is_one_the_api_server_could_have_generated() -> None:
    name = generated_name("p" * 100 + "-extended-resources-", random.Random(1))
    assert len(name) == 63 and name.startswith("p" * 58)
    assert set(name[58:]) <= set("bcdfghjklmnpqrstvwxz2456789")


def taken(change: str) -> dict[str, Any]:
    """The claim a create would make, already under its name, changed so it is not that create's."""
    claim = copy.deepcopy(claim_to_create())
    meta, spec = claim["metadata"], claim["spec"]
    meta.update(name=generated_name(meta["generateName"], random.Random(7)), uid="earlier")
    if change == "another pod's":
        meta["ownerReferences"][0]["uid"] = "another-pod"
    elif change == "allocated":
        claim["status"] = {"allocation": {"devices": {"results": []}}}
    elif change == "reserved":
        claim["status"] = {"reservedFor": [{"resource": "pods", "name": "pod", "uid": "pod-uid"}]}
    elif change == "being deleted":
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    elif change == "another spec":
        spec["devices"]["requests"][0]["exactly"]["count"] = 2
    elif change == "not annotated":
        del meta["annotations"]
    return claim


@pytest.mark.parametrize(
    "change", ["another pod's", "allocated", "reserved", "being deleted", "another spec", "not annotated"]
)
async def test_a_claim_under_the_name_that_is_not_the_one_asked_for_is_never_taken(change: str) -> None:
    existing = taken(change)
    api = LossyClaimApi(claims={existing["metadata"]["name"]: existing})
    result = await create(api, claim_to_create())
    assert (result.status, list(api.claims.values())) == (409, [existing])


async def test_the_api_server_s_defaults_do_not_hide_the_claim_a_lost_create_made() -> None:
    """The API server adds fields (defaults, its own metadata): the claim is the one asked for all the same."""
    existing = taken("")
    existing["metadata"].update(creationTimestamp="2026-01-01T00:00:00Z", generation=1)
    existing["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = False
    api = LossyClaimApi(claims={existing["metadata"]["name"]: existing})
    result = await create(api, claim_to_create())
    assert result.ok and result.body == existing and len(api.claims) == 1
