"""kopf's private API, all of it that usher uses, in this one module.

usher reads kopf's watch streams itself (`streaming`) rather than through kopf's
handlers: kopf's per-object handler pipeline cost about 80 us of CPU per event here,
for work only state handlers need. What that takes lives in kopf's ``_cogs``
package, which kopf does not promise to keep. So: pyproject pins kopf to 1.45.x,
every e2e test runs usher's watches against a real API server, and
tests/unit/test_architecture.py fails if any other module imports a private kopf
module. On a kopf upgrade this module, and what its users rely on, is what to check:

- `watch_stream` (``infinite_watch``): lists the kind (an event of type None per
  object, the listing sent without a resourceVersion), yields `LISTED`, watches from
  the listing's resourceVersion, resumes a dropped watch from the last one it saw,
  lists again after a 410 or a connection lost while listing (`relisting` relies on
  that shape and on the LIST being a consistent read), and gives up only on other
  API errors (raised);
- `use_credentials` (``auth.vault_var``): kopf's API calls read their credentials
  from that context variable, which kopf's own tasks set;
- `Vault` (what kopf's login handler fills, passed to ``kopf.operator``) and
  `Resource` (a kind's group, version, plural and scope).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import kopf
from kopf._cogs.clients import auth as kopf_auth
from kopf._cogs.clients import watching as kopf_watching
from kopf._cogs.structs.credentials import Vault
from kopf._cogs.structs.references import Resource

Bookmark = kopf_watching.Bookmark
"""The marks kopf puts among the raw events of a stream (only `LISTED` so far)."""
LISTED: Final = kopf_watching.Bookmark.LISTED
"""Ends each listing: every object of the kind as of the listing was yielded before it."""

StreamItem = Bookmark | Mapping[str, Any]
"""One item of `watch_stream`: a mark, or a raw event (``{"type": None | "ADDED" | ..., "object": {...}}``)."""


def resource(group: str, version: str, plural: str, *, namespaced: bool) -> Resource:
    """kopf's description of one kind."""
    return Resource(group, version, plural, namespaced=namespaced)


def watch_stream(settings: kopf.OperatorSettings, resource: Resource) -> AsyncIterator[StreamItem]:
    """kopf's endless list-then-watch of one kind across all namespaces (see the module docstring)."""
    return kopf_watching.infinite_watch(settings=settings, resource=resource, namespace=None)


def use_credentials(vault: Vault) -> None:
    """Make kopf's API calls in this task (and the tasks it starts) authenticate from ``vault``."""
    kopf_auth.vault_var.set(vault)


__all__ = ["LISTED", "Bookmark", "Resource", "StreamItem", "Vault", "resource", "use_credentials", "watch_stream"]
