"""The one HTTP seam to the API server for writes: raw JSON in, status + JSON out.

Built on ``kubernetes.aio``'s ApiClient (aiohttp, auth, TLS) but without its
model (de)serialisation: the dispatcher needs status codes and headers
(Retry-After), and a pods/binding response is a Status the generated client
cannot deserialise into a V1Binding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kubernetes.aio.client


@dataclass(frozen=True, slots=True)
class ApiResult:
    """An API server's answer: HTTP status (0 when never sent), decoded body and headers."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self.body.get("reason") or f"HTTP {self.status}")


class KubeApi:
    """``await api.request("POST", "/api/v1/...", body)`` -> ApiResult. Never raises on HTTP errors."""

    def __init__(self, config: kubernetes.aio.client.Configuration, *, timeout: float = 30.0) -> None:
        self._client = kubernetes.aio.client.ApiClient(configuration=config)
        self._client.user_agent = "usher"
        self._timeout = timeout

    async def close(self) -> None:
        await self._client.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | list[Any] | None = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float | None = None,
    ) -> ApiResult:
        """``timeout``: seconds for the whole call (the client's default when None); then TimeoutError."""
        headers = {"Accept": accept, "Content-Type": content_type}
        # The body is plain JSON already: it bypasses param_serialize, whose model sanitiser walks
        # every nested value of every object written (measurable on claims with status).
        serialized = await self._client.param_serialize(
            method=method, resource_path=path, header_params=headers, auth_settings=["BearerToken"]
        )
        http_method, url, header_params, _, post_params = serialized
        response = await self._client.call_api(
            http_method,
            url,
            header_params,
            body,
            post_params,
            _request_timeout=self._timeout if timeout is None else timeout,
        )
        raw = await response.read()
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"message": raw.decode(errors="replace")[:500]}
        if not isinstance(data, dict):
            data = {"items": data}
        return ApiResult(status=response.status, body=data, headers=dict(response.headers))
