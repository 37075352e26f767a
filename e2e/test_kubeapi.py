"""usher's own HTTP client (``KubeApi`` over ``http1``) against the real API server.

Every write usher makes goes through it, so the other e2e tests exercise it throughout; these pin the
parts they would not notice: connections are kept alive, a chunked answer (Go's server streams any body
past its buffer) is read whole, an answer's status and headers reach the caller, and a call that timed out
leaves no half-read connection behind to be reused. Behind an HTTP proxy (HTTPS_PROXY, or a kubeconfig's
proxy-url) the calls go through the Kubernetes client instead, tunnelled by a real CONNECT proxy.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from e2e.controlplane import ControlPlane
from usher.__main__ import EVENT_LOOPS, loop_factory
from usher.adapters.connecting import connect
from usher.adapters.kubeapi import KubeApi

pytestmark = pytest.mark.e2e

T = TypeVar("T")


@pytest.fixture(params=EVENT_LOOPS)
def event_loop_name(request: pytest.FixtureRequest) -> str:
    """The client runs on either loop ``usher run --event-loop`` offers (their TLS transports differ)."""
    return str(request.param)


def with_api(control_plane: ControlPlane, scenario: Callable[[KubeApi], Awaitable[T]], loop: str) -> T:
    async def run() -> T:
        connection = await connect(str(control_plane.kubeconfig))
        api = KubeApi(connection.async_config)
        try:
            return await scenario(api)
        finally:
            await api.close()

    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(run())


def config_map(name: str, size: int = 10) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"blob": "x" * size}}


def test_calls_one_after_another_share_one_kept_alive_connection(
    control_plane: ControlPlane, namespace: str, event_loop_name: str
) -> None:
    async def scenario(api: KubeApi) -> tuple[list[int], int | None]:
        statuses = []
        for i in range(20):
            created = await api.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map(f"c{i}"))
            statuses.append(created.status)
        return statuses, api.connections_made

    statuses, connections = with_api(control_plane, scenario, event_loop_name)
    assert statuses == [201] * 20
    assert connections == 1


def test_a_chunked_list_is_read_whole(control_plane: ControlPlane, namespace: str, event_loop_name: str) -> None:
    async def scenario(api: KubeApi) -> tuple[str | None, list[str]]:
        for i in range(40):
            created = await api.request(
                "POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map(f"big{i:02d}", 4000)
            )
            assert created.status == 201, created.message
        listed = await api.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert listed.ok, listed.message
        names = sorted(item["metadata"]["name"] for item in listed.body["items"])
        return listed.headers.get("Transfer-Encoding"), [n for n in names if n.startswith("big")]

    encoding, names = with_api(control_plane, scenario, event_loop_name)
    assert encoding == "chunked", "the API server streamed the list"
    assert names == [f"big{i:02d}" for i in range(40)]


def test_an_error_answer_gives_its_status_message_and_headers(
    control_plane: ControlPlane, namespace: str, event_loop_name: str
) -> None:
    async def scenario(api: KubeApi) -> tuple[int, str, str | None, dict[str, object]]:
        missing = await api.request("GET", f"/api/v1/namespaces/{namespace}/pods/nobody")
        patched = await api.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/configmaps/nothing",
            {"data": {"a": "b"}},
            content_type="application/merge-patch+json",
        )
        created = await api.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map("m"))
        merged = await api.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/configmaps/m",
            {"data": {"a": "b"}},
            content_type="application/merge-patch+json",
        )
        assert created.status == 201 and patched.status == 404
        return missing.status, missing.message, missing.headers.get("Content-Type"), merged.body["data"]

    status, message, content_type, data = with_api(control_plane, scenario, event_loop_name)
    assert status == 404
    assert message == 'pods "nobody" not found'
    assert content_type == "application/json"
    assert data == {"blob": "x" * 10, "a": "b"}


def test_a_call_that_timed_out_leaves_no_connection_to_reuse(
    control_plane: ControlPlane, namespace: str, event_loop_name: str
) -> None:
    async def scenario(api: KubeApi) -> tuple[bool, int, int | None]:
        await api.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
        before = api.connections_made
        timed_out = False
        try:  # a watch answers only when something changes: nothing does
            await api.request(
                "GET",
                f"/api/v1/namespaces/{namespace}/secrets?watch=1&resourceVersion=0&timeoutSeconds=60&fieldSelector=metadata.name%3Dnone",
                timeout=0.5,
            )
        except TimeoutError:
            timed_out = True
        after = await api.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert before is not None
        return timed_out, after.status, (api.connections_made or 0) - before

    timed_out, status, opened = with_api(control_plane, scenario, event_loop_name)
    assert timed_out
    assert status == 200
    assert opened == 1, "the timed-out connection was closed and a new one opened"


def test_warmed_connections_carry_a_burst_without_opening_more(
    control_plane: ControlPlane, namespace: str, event_loop_name: str
) -> None:
    async def scenario(api: KubeApi) -> tuple[int, int | None, int, list[int], int | None]:
        opened = await api.warm(8)
        after_warming = api.connections_made
        again = await api.warm(8)  # eight are open already
        burst = await asyncio.gather(
            *(api.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map(f"w{i}")) for i in range(8))
        )
        return opened, after_warming, again, [r.status for r in burst], api.connections_made

    opened, after_warming, again, statuses, after_burst = with_api(control_plane, scenario, event_loop_name)
    assert (opened, after_warming, again) == (8, 8, 0)
    assert statuses == [201] * 8
    assert after_burst == 8, "the eight calls in flight at once found the warmed connections"


class ConnectProxy:
    """An HTTP CONNECT proxy on loopback (as a corporate egress proxy is): each tunnel's target is recorded,
    then bytes are piped both ways untouched (TLS runs end to end, through it)."""

    def __init__(self) -> None:
        self.tunnels: list[str] = []
        self.url = ""
        self._server: asyncio.Server | None = None
        self._ends: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> ConnectProxy:
        self._server = await asyncio.start_server(self._tunnel, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for end in self._ends:
            end.close()
        await asyncio.gather(*(end.wait_closed() for end in self._ends), return_exceptions=True)

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._ends.append(writer)
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        host, port = target.rsplit(":", 1)
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        self._ends.append(upstream_writer)
        self.tunnels.append(target)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except ConnectionError:
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


PROXY_VARIABLES = ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy")


def calls_through_a_proxy(
    kubeconfig_for: Callable[[ConnectProxy], Path], namespace: str
) -> tuple[tuple[int, int, str, int], int | None, list[str]]:
    """With a CONNECT proxy running, KubeApi from the kubeconfig ``kubeconfig_for(proxy)`` gives makes three
    calls (a create, a 404, a read) and asks for four warm connections: the answers (and how many were
    opened), usher's own connections, and the proxy's tunnels."""

    async def run() -> tuple[tuple[int, int, str, int], int | None, list[str]]:
        async with ConnectProxy() as proxy:
            connection = await connect(str(kubeconfig_for(proxy)))
            api = KubeApi(connection.async_config)
            try:
                created = await api.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map("proxied"))
                missing = await api.request("GET", f"/api/v1/namespaces/{namespace}/pods/nobody")
                read = await api.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/proxied")
                warmed = await api.warm(4)  # nothing: the Kubernetes client keeps its own connections
                answers = (created.status, missing.status, read.body["data"]["blob"], warmed)
                return answers, api.connections_made, proxy.tunnels
            finally:
                await api.close()

    return asyncio.run(run())


def test_with_https_proxy_set_calls_go_through_the_proxy(
    control_plane: ControlPlane, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTPS_PROXY in the environment: KubeApi leaves the calls to the Kubernetes client, which tunnels them."""
    for variable in PROXY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)

    def proxy_in_environment(proxy: ConnectProxy) -> Path:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        return control_plane.kubeconfig

    answers, own_connections, tunnels = calls_through_a_proxy(proxy_in_environment, namespace)
    assert answers == (201, 404, "x" * 10, 0)
    assert own_connections is None, "usher's own client stands aside"
    assert tunnels and set(tunnels) == {control_plane.server.removeprefix("https://")}


def test_a_kubeconfig_proxy_url_sends_the_calls_through_the_proxy(
    control_plane: ControlPlane, namespace: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for variable in PROXY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)

    def proxy_url_in_kubeconfig(proxy: ConnectProxy) -> Path:
        config = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
        config["clusters"][0]["cluster"]["proxy-url"] = proxy.url
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps(config))
        return kubeconfig

    answers, own_connections, tunnels = calls_through_a_proxy(proxy_url_in_kubeconfig, namespace)
    assert answers == (201, 404, "x" * 10, 0)
    assert own_connections is None, "usher's own client stands aside"
    assert tunnels and set(tunnels) == {control_plane.server.removeprefix("https://")}
