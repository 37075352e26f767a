"""The HTTP endpoints: /metrics for Prometheus, /healthz and /readyz for probes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from usher.adapters.metrics import Metrics


class DebugSource:
    """What the debug endpoints show (off unless --enable-debug-endpoints)."""

    def queue(self) -> dict[str, Any]:
        return {}

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return {}


class HealthSource:
    """What the probes ask: is the process alive, is it ready to schedule."""

    def healthy(self) -> tuple[bool, str]:
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        return True, "ok"


def build_app(metrics: Metrics, health: HealthSource, debug: DebugSource | None = None) -> web.Application:
    async def metrics_handler(_: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def probe(check: Callable[[], tuple[bool, str]]) -> Callable[[web.Request], object]:
        async def handler(_: web.Request) -> web.Response:
            ok, detail = check()
            return web.Response(status=200 if ok else 503, text=detail + "\n")

        return handler

    app = web.Application()
    if debug is not None:

        async def queue_handler(_: web.Request) -> web.Response:
            return web.json_response(debug.queue())

        async def pod_handler(request: web.Request) -> web.Response:
            return web.json_response(debug.pod(request.match_info["namespace"], request.match_info["name"]))

        app.router.add_get("/debug/queue", queue_handler)
        app.router.add_get("/debug/pods/{namespace}/{name}", pod_handler)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", probe(health.healthy))  # type: ignore[arg-type]
    app.router.add_get("/readyz", probe(health.ready))  # type: ignore[arg-type]
    return app


def parse_bind_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6) -> (host, port); a clear error otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--metrics-bind-address {address!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


async def serve(app: web.Application, address: str) -> tuple[web.AppRunner, int]:
    """Start serving; returns the runner (for cleanup) and the bound port (useful with port 0)."""
    host, port = parse_bind_address(address)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    # The real port when 0 was asked for.
    bound = int(runner.addresses[0][1]) if runner.addresses else port
    return runner, bound
