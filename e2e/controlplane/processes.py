"""Processes of a local control plane: free ports, starting one with its log, probing it, stopping it.

Nothing here knows which component is which; `e2e.controlplane.local`
decides the flags and the order. Every process gets its own process group
(so a stop reaches whatever it forked) and appends stdout and stderr to
``<logs>/<name>.log``, which error messages quote.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.controlplane.errors import ComponentError

__all__ = ["Component", "crash", "free_ports", "http_get", "insecure_context", "log_tail", "spawn", "terminate"]

_PORT_LOCK = threading.Lock()
_PORTS_HANDED_OUT: set[int] = set()


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free loopback TCP ports.

    Why: fixed ports would make two control planes clash. All sockets are held
    open together so the kernel hands out distinct ports, and ports already
    handed out by this process are never reused (parallel starts in threads).
    Another process could still grab a port before the component binds it;
    the window is milliseconds and the component would fail loudly.
    """
    sockets: list[socket.socket] = []
    ports: list[int] = []
    with _PORT_LOCK:
        try:
            while len(ports) < count:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
                if port not in _PORTS_HANDED_OUT:
                    _PORTS_HANDED_OUT.add(port)
                    ports.append(port)
        finally:
            for sock in sockets:
                sock.close()
    return ports


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, for error messages that explain themselves."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as error:
        return f"(cannot read {path}: {error})"
    return "\n".join(data.splitlines()[-lines:])


def http_get(
    scheme: str, port: int, path: str, context: ssl.SSLContext | None = None, timeout: float = 2.0
) -> tuple[int, bytes]:
    """One GET against a loopback endpoint, for health checks."""
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def insecure_context() -> ssl.SSLContext:
    """TLS without verification, only for self-signed /healthz endpoints of kcm and the scheduler."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@dataclass
class Component:
    """One running control-plane process, in its own process group, logging to a file."""

    name: str
    argv: list[str]
    process: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The end of this component's log."""
        return log_tail(self.log_path, lines)

    def ensure_running(self) -> None:
        """Raise `ComponentError` with the log tail if the process has exited."""
        code = self.process.poll()
        if code is not None:
            raise ComponentError(
                f"{self.name} exited with code {code}; last lines of {self.log_path}:\n{self.log_tail()}"
            )


def spawn(name: str, argv: list[str], logs_dir: Path, cwd: Path, *, env: Mapping[str, str] | None = None) -> Component:
    """Start one component with stdout+stderr appended to ``logs/<name>.log``; ``env`` adds variables.

    Its own session (process group) lets `terminate` signal it and anything it
    forks at once, and keeps terminal Ctrl-C from reaching it behind our back.
    When started from the main thread, ``setpriv --pdeathsig KILL`` also makes
    the kernel kill it if this Python process dies without running atexit
    hooks (SIGKILL, a pytest-timeout ``os._exit``). Not from other threads:
    the parent-death signal fires when the *thread* that forked exits.
    """
    log_path = logs_dir / f"{name}.log"
    prefix: list[str] = []
    setpriv = shutil.which("setpriv")
    if setpriv and threading.current_thread() is threading.main_thread():
        prefix = [setpriv, "--pdeathsig", "KILL"]
    environment = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | dict(env or {})
    with log_path.open("ab") as log:
        command = shlex.join([f"{key}={value}" for key, value in (env or {}).items()] + argv)
        log.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} {command}\n".encode())
        log.flush()
        process = subprocess.Popen(
            prefix + argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=environment,
            start_new_session=True,
        )
    return Component(name=name, argv=argv, process=process, log_path=log_path)


def crash(component: Component) -> None:
    """SIGKILL the component's process group at once: no shutdown handler runs, as in a crash."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(component.process.pid, signal.SIGKILL)
    component.process.wait()


def terminate(components: Sequence[Component], grace: float) -> None:
    """SIGTERM every component's process group, then SIGKILL what outlives ``grace``.

    All at once rather than one by one: the state is thrown away anyway, and
    a sequential graceful shutdown of the apiserver alone can take seconds.
    """
    for component in components:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(component.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for component in components:
        try:
            component.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(component.process.pid, signal.SIGKILL)
            component.process.wait()
        # Strays the component may have forked in its group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(component.process.pid, signal.SIGKILL)
