"""Which optional kinds the API server serves, asked once at start-up from its discovery documents.

PodGroups and Workloads (scheduling.k8s.io/v1beta1, a beta API off by default in
kube-apiserver) and DeviceTaintRules are watched only when served. Without
PodGroups usher runs without gang support, which the composition root logs once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from usher.adapters.kubeapi import KubeApi
from usher.adapters.watching.kinds import Kind, version

logger = logging.getLogger(__name__)


async def discover(
    api: KubeApi,
    kinds: Iterable[Kind],
    *,
    attempts: int = 5,
    retry: float = 1.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> tuple[Kind, ...]:
    """Which of ``kinds`` the API server serves, from its discovery documents (one GET per group version).

    A 404 means the group version is not served (a beta API the API server was not told to serve).
    Any other failure is retried ``attempts`` times, ``retry`` seconds apart and doubling; then the
    kinds of that group version count as not served, with a warning: usher starts without them.
    """
    served: list[Kind] = []
    by_version: dict[str, list[Kind]] = {}
    for group, plural in kinds:
        by_version.setdefault(f"/apis/{group}/{version(group, plural)}" if group else "/api/v1", []).append(
            (group, plural)
        )
    for path, wanted in by_version.items():
        delay = retry
        for attempt in range(1, attempts + 1):
            try:
                result = await api.request("GET", path)
            except Exception as error:  # a connection failure: retried like a 5xx
                reason = f"{type(error).__name__}: {error}"
            else:
                if result.status == 404:
                    break
                if result.ok:
                    names = {r.get("name") for r in result.body.get("resources") or () if isinstance(r, Mapping)}
                    served.extend(kind for kind in wanted if kind[1] in names)
                    break
                reason = result.message
            if attempt == attempts:
                logger.warning("discovering %s failed (%s): starting without %s", path, reason, wanted)
                break
            await sleep(delay)
            delay *= 2
    return tuple(served)
