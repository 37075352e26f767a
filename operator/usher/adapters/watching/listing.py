"""usher's own LISTs of a kind (metadata only, paginated): what the initial sync and the reconciler compare with."""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import quote

from usher.adapters.kubeapi import KubeApi
from usher.adapters.watching.keys import object_key
from usher.adapters.watching.kinds import api_path
from usher.adapters.watching.ports import Lister


class ListingError(RuntimeError):
    """A LIST answered neither with the objects nor with 404."""


METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"
"""Names and uids are all the sync needs: the API server sends metadata only (kopf lists the objects)."""


def api_lister(api: KubeApi, *, page_size: int = 500) -> Lister:
    """A `Lister` through usher's API client: paginated, so one consistent snapshot per kind."""

    async def list_keys(group: str, plural: str) -> Collection[str] | None:
        base = api_path(group, plural)
        keys: list[str] = []
        token = ""
        while True:
            page = f"{base}?limit={page_size}" + (f"&continue={quote(token, safe='')}" if token else "")
            result = await api.request("GET", page, accept=METADATA_ONLY)
            if result.status == 404 and not token:
                return None
            if not result.ok:
                raise ListingError(f"GET {base}: {result.message}")
            keys.extend(object_key(item.get("metadata") or {}) for item in result.body.get("items") or ())
            token = (result.body.get("metadata") or {}).get("continue") or ""
            if not token:
                return keys

    return list_keys
