"""``python -m e2e.controlplane up`` (``make controlplane``): a local control plane for manual poking, until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from e2e.controlplane.errors import ComponentError
from e2e.controlplane.local import start

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run the control plane until SIGINT/SIGTERM, and return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m e2e.controlplane",
        description="A real, local Kubernetes control plane for usher's end-to-end tests and benchmarks.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a control plane and block until SIGINT/SIGTERM")
    up.add_argument("--workdir", type=Path, help="work directory (default: a new temporary one)")
    up.add_argument(
        "--apiserver-arg", action="append", default=[], metavar="ARG",
        help="extra kube-apiserver flag, repeatable; use the = form: --apiserver-arg=--max-requests-inflight=0",
    )  # fmt: skip
    up.add_argument("--no-kcm", action="store_true", help="do not start kube-controller-manager")
    up.add_argument("--no-kwok", action="store_true", help="do not start kwok")
    up.add_argument("--scheduler", action="store_true", help="also start the stock kube-scheduler")
    up.add_argument("--nodes", type=int, default=0, help="add this many kwok nodes (kwok-node-N)")
    args = parser.parse_args(argv)

    stop_requested = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    plane = start(
        args.workdir,
        extra_apiserver_args=args.apiserver_arg,
        kcm=not args.no_kcm,
        kwok=not args.no_kwok,
        scheduler=args.scheduler,
    )
    try:
        names = [f"kwok-node-{i}" for i in range(args.nodes)]
        for name in names:
            plane.add_kwok_node(name, wait=False)
        if names:
            plane.wait_for_nodes_ready(names)
        print(f"control plane up in {plane.startup_seconds:.1f} s ({plane.timings})", flush=True)
        print(f"export KUBECONFIG={plane.kubeconfig}")
        print(f"# apiserver {plane.server}; logs in {plane.logs_dir}; Ctrl-C to stop", flush=True)
        while not stop_requested.wait(0.5):
            plane.ensure_running()
    except ComponentError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
        print(f"stopped; logs kept in {plane.logs_dir}", file=sys.stderr)
    return 0
