"""Waiting for a condition instead of sleeping for a guessed time.

`wait_for` is the one poll loop of the harness and the e2e suite; a cluster's
own ``wait_for`` (see `e2e.controlplane.clusters.Cluster`) wraps it to also
fail fast when a component it runs has died.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from e2e.controlplane.errors import WaitTimeoutError

__all__ = ["wait_for"]

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.1,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Why: e2e tests must wait for a condition, never sleep for a guessed time;
    short polls keep fast paths fast and the timeout bounds slow ones.
    Exceptions listed in ``ignore`` count as "not yet" (and the last one is
    quoted on timeout); any other exception propagates at once.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except ignore as error:
            last_error = error
        else:
            if value:
                return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            detail = f" (last error: {last_error!r})" if last_error is not None else ""
            raise WaitTimeoutError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(min(interval, remaining))
