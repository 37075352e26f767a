"""e2e/dra-proxy, the hostpathplugin of the DRA e2e specs' proxy pod, run as e2e.test runs it.

test/e2e/dra/utils/deploy.go execs ``/hostpathplugin --v=5 --endpoint=<socket> --proxy-endpoint=tcp://:<port>``
in the pod and reaches the port through port-forwarding, keeping connections open before the
kubelet dials (test/e2e/storage/drivers/proxy). Here the program runs on this machine with the
same flags: the test's TCP connections play e2e.test's, its Unix ones the kubelet's. It needs Go
(as e2e/image/build.sh hostpathplugin does), no cluster and no image. Waits are on conditions: a
connect that succeeds, a read that returns.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Protocol

import pytest

from e2e.controlplane import free_ports, wait_for

SOURCE = Path(__file__).resolve().parent / "dra-proxy"
#: How long a read or a connect may take: generous, as everything is on this machine.
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def proxy_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """e2e/dra-proxy built with build.sh's flags."""
    go = shutil.which("go")
    assert go, "go is not on PATH: e2e/build-binaries.sh and e2e/image/build.sh need it too"
    binary = tmp_path_factory.mktemp("dra-proxy") / "hostpathplugin"
    env = os.environ | {"CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}
    result = subprocess.run(
        [go, "build", "-trimpath", "-o", str(binary), "."],
        cwd=SOURCE, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return binary


class Start(Protocol):
    def __call__(self, endpoint: Path, port: int) -> subprocess.Popen[bytes]: ...


@pytest.fixture
def start(proxy_binary: Path, tmp_path: Path) -> Iterator[Start]:
    """``start(endpoint, port)``: the proxy with deploy.go's flags, its log in tmp_path; killed at the end."""
    runs: list[subprocess.Popen[bytes]] = []

    def run(endpoint: Path, port: int) -> subprocess.Popen[bytes]:
        with open(tmp_path / f"proxy-{len(runs)}.log", "wb") as log:
            process = subprocess.Popen(
                [str(proxy_binary), "--v=5", f"--endpoint={endpoint}", f"--proxy-endpoint=tcp://:{port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        runs.append(process)
        return process

    yield run
    for process in runs:
        if process.poll() is None:
            process.kill()
        process.wait(TIMEOUT)


@pytest.fixture
def endpoint(tmp_path: Path) -> Path:
    """The kubelet's side: a socket path well under AF_UNIX's 107 bytes."""
    path = tmp_path / "dra.sock"
    assert len(os.fsencode(path)) < 100, path
    return path


def connect(family: socket.AddressFamily, address: str | tuple[str, int]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    try:
        sock.connect(address)
    except OSError:
        sock.close()
        raise
    return sock


def e2e_test_connects(port: int) -> socket.socket:
    """A connection to the TCP side once it listens, as e2e.test's port-forward opens one."""
    return wait_for(
        lambda: connect(socket.AF_INET, ("127.0.0.1", port)), TIMEOUT, f"the proxy to listen on port {port}",
        ignore=(ConnectionRefusedError,),
    )  # fmt: skip


def kubelet_connects(endpoint: Path) -> socket.socket:
    """A connection to the Unix side once it listens (a stale socket file refuses until it is replaced)."""
    return wait_for(
        lambda: connect(socket.AF_UNIX, str(endpoint)), TIMEOUT, f"the proxy to listen on {endpoint}",
        ignore=(ConnectionRefusedError, FileNotFoundError),
    )  # fmt: skip


def read(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes, or what came before the peer closed."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def assert_paired(kubelet: socket.socket, e2e_test: socket.socket) -> None:
    kubelet.sendall(b"ping")
    assert read(e2e_test, 4) == b"ping"
    e2e_test.sendall(b"pong")
    assert read(kubelet, 4) == b"pong"


def test_each_kubelet_connection_is_paired_with_a_waiting_e2e_test_connection_both_ways(
    start: Start, endpoint: Path
) -> None:
    [port] = free_ports(1)
    proxy = start(endpoint, port)
    with ExitStack() as stack:
        # e2e.test's connections are open before the kubelet dials; the kernel completes them.
        first, second = (stack.enter_context(closing(e2e_test_connects(port))) for _ in range(2))
        kubelet = stack.enter_context(closing(kubelet_connects(endpoint)))
        assert_paired(kubelet, first)
        kubelet.close()
        assert read(first, 1) == b"", "the kubelet's close reaches e2e.test"
        # The accept loop goes on: the next kubelet connection gets the next waiting one.
        again = stack.enter_context(closing(kubelet_connects(endpoint)))
        assert_paired(again, second)
        second.close()
        assert read(again, 1) == b"", "e2e.test's close reaches the kubelet"
    proxy.send_signal(signal.SIGTERM)
    assert proxy.wait(TIMEOUT) == 0
    assert not endpoint.exists(), "SIGTERM removes the socket"


def test_a_socket_left_behind_by_a_killed_run_is_replaced_by_the_next(start: Start, endpoint: Path) -> None:
    # deploy.go runs the exec again when it ends, and says "Killing hostpathplugin does not remove the socket".
    first_port, port = free_ports(2)
    killed = start(endpoint, first_port)
    with closing(kubelet_connects(endpoint)):
        pass
    killed.kill()
    killed.wait(TIMEOUT)
    assert endpoint.is_socket(), "SIGKILL leaves the socket"
    start(endpoint, port)
    with closing(e2e_test_connects(port)) as e2e_test, closing(kubelet_connects(endpoint)) as kubelet:
        assert_paired(kubelet, e2e_test)


def test_a_run_whose_port_is_taken_fails_and_leaves_the_running_ones_socket_alone(start: Start, endpoint: Path) -> None:
    [port] = free_ports(1)
    start(endpoint, port)
    with closing(e2e_test_connects(port)) as e2e_test:
        second = start(endpoint, port)
        assert second.wait(TIMEOUT) == 1
        with closing(kubelet_connects(endpoint)) as kubelet:
            assert_paired(kubelet, e2e_test)
