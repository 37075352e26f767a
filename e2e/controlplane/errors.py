"""Everything the harness raises on purpose, under one base class.

Each error names what failed and carries what explains it (a log tail,
kubectl's stderr, the apiserver's answer), so a failing e2e test reads as a
diagnosis rather than a stack trace.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

__all__ = [
    "ApiError",
    "ComponentError",
    "ControlPlaneError",
    "KubectlError",
    "MissingBinaryError",
    "WaitTimeoutError",
]


class ControlPlaneError(RuntimeError):
    """Base class of everything this package raises on purpose."""


class MissingBinaryError(ControlPlaneError):
    """A pinned binary is not in the cache; the message says how to build it."""


class ComponentError(ControlPlaneError):
    """A component exited or did not get ready; the message carries its log tail."""


class ApiError(ControlPlaneError):
    """The apiserver answered a raw request with an error status."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body.strip()[:2000]}")
        self.status = status
        self.method = method
        self.path = path
        self.body = body


class KubectlError(ControlPlaneError):
    """kubectl exited non-zero; the message carries its stderr."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(f"kubectl {shlex.join(args)} exited {returncode}: {stderr.strip() or stdout.strip()}")
        self.args_ = tuple(args)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


class WaitTimeoutError(TimeoutError):
    """A `wait_for` condition did not become true in time."""
