"""The one HTTP seam to the API server for writes: raw JSON in, status + JSON out.

Requests go through usher's own keep-alive HTTP/1.1 client (``usher.adapters.http1``, which says why),
with the TLS settings and credentials the Kubernetes client loaded (``connecting``): its CA, client
certificate, ``verify_ssl``, ``tls_server_name``, and the bearer token read per request, so a rotated
service-account token or a refreshed exec credential is used as soon as the client has it. An API server
reached through a proxy (``HTTPS_PROXY`` or the kubeconfig's ``proxy-url``) is called through the
Kubernetes client's aiohttp session instead, which speaks CONNECT. Neither deserialises into models: the
dispatcher needs status codes and headers (Retry-After), and a pods/binding response is a Status the
generated client cannot deserialise into a V1Binding.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import kubernetes.aio.client
import kubernetes.aio.client.rest

from usher.adapters.http1 import HttpPool

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")


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
    """``await api.request("POST", "/api/v1/...", body)`` -> ApiResult. Never raises on HTTP errors.

    Transport failures raise ``OSError`` (``ConnectionError``, ``ssl.SSLError``, aiohttp's errors through a
    proxy) or ``TimeoutError``.

    Each instance holds connections of its own, at most ``connections`` (the configuration's
    ``connection_pool_maxsize`` when None), so calls on one never wait for another's; through a proxy, the
    Kubernetes client's session is the instance's own too, with the configuration's limit."""

    def __init__(
        self, config: kubernetes.aio.client.Configuration, *, timeout: float = 30.0, connections: int | None = None
    ) -> None:
        self._config = config
        self._timeout = timeout
        self._client: kubernetes.aio.client.ApiClient | None = None
        self._pool: HttpPool | None = None
        if config.proxy or any(os.environ.get(v) for v in PROXY_VARIABLES):
            self._client = kubernetes.aio.client.ApiClient(configuration=config)
            self._client.user_agent = "usher"
            return
        url = urlsplit(config.host)
        secure = url.scheme == "https"
        self._base = url.path.rstrip("/")
        """A path the API server is served under (some proxies and gateways add one)."""
        self._host_header = url.netloc
        self._pool = HttpPool(
            host=url.hostname or "localhost",
            port=url.port or (443 if secure else 80),
            ssl_context=_ssl_context(config) if secure else None,
            server_hostname=config.tls_server_name or None,
            limit=connections or config.connection_pool_maxsize or 64,
        )

    @property
    def connections_made(self) -> int | None:
        """Connections opened so far by usher's own client (None through a proxy)."""
        return self._pool.connections_made if self._pool is not None else None

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
        if self._client is not None:
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
        seconds = self._timeout if timeout is None else timeout
        if self._pool is None:
            status, headers, raw = await self._request_through_client(method, path, body, content_type, accept, seconds)
        else:
            payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
            head = await self._head(method, path, accept, content_type if body is not None else None, payload)
            async with asyncio.timeout(seconds):
                response = await self._pool.request(head, payload, no_body=method == "HEAD")
            status, headers, raw = response.status, response.headers, response.body
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"message": raw.decode(errors="replace")[:500]}
        if not isinstance(data, dict):
            data = {"items": data}
        return ApiResult(status=status, body=data, headers=headers)

    async def warm(self, count: int) -> int:
        """Open connections until ``count`` are open, ahead of a burst of calls (see ``HttpPool.warm``): each
        answers a ``GET /version`` first. Returns how many were opened; 0 through a proxy. Bounded by the
        client's timeout (then TimeoutError); a connection that fails to open is left to the calls."""
        if self._pool is None:
            return 0
        head = await self._head("GET", "/version", "application/json", None, b"")
        async with asyncio.timeout(self._timeout):
            return await self._pool.warm(count, head)

    async def _head(self, method: str, path: str, accept: str, content_type: str | None, payload: bytes) -> bytes:
        """A request's line and headers for usher's own client, the credentials current."""
        lines = [
            f"{method} {self._base}{path} HTTP/1.1",
            f"Host: {self._host_header}",
            "User-Agent: usher",
            f"Accept: {accept}",
        ]
        token = await self._token()
        if token:
            lines.append(f"Authorization: {token}")
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        if content_type is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(payload)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _token(self) -> str | None:
        """The Authorization value, as the Kubernetes client would send it now (its refresh hook run)."""
        keys = self._config.api_key
        if "BearerToken" not in keys and "authorization" not in keys:
            return None
        token: str | None = await self._config.get_api_key_with_prefix("BearerToken", alias="authorization")
        return token

    async def _request_through_client(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | list[Any] | None,
        content_type: str,
        accept: str,
        seconds: float,
    ) -> tuple[int, dict[str, str], bytes]:
        assert self._client is not None
        headers = {"Accept": accept, "Content-Type": content_type}
        # The body is plain JSON already: it bypasses param_serialize, whose model sanitiser walks
        # every nested value of every object written (measurable on claims with status).
        serialized = await self._client.param_serialize(
            method=method, resource_path=path, header_params=headers, auth_settings=["BearerToken"]
        )
        http_method, url, header_params, _, post_params = serialized
        response = await self._client.call_api(
            http_method, url, header_params, body, post_params, _request_timeout=seconds
        )
        return response.status, dict(response.headers), await response.read()


def _ssl_context(config: kubernetes.aio.client.Configuration) -> ssl.SSLContext:
    """The TLS settings the Kubernetes client's own session would use: its RESTClientObject builds them
    (CA, client certificate, verify_ssl, strict verification) without opening a session."""
    context: ssl.SSLContext = kubernetes.aio.client.rest.RESTClientObject(config).ssl_context
    return context
