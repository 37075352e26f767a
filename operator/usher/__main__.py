"""Command line: ``usher run``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from usher import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="usher", description="A secondary Kubernetes scheduler.")
    parser.add_argument("--version", action="version", version=f"usher {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="watch the cluster and schedule pods")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    run.add_argument("--scheduler-name", default="usher", help="spec.schedulerName of the pods to schedule")
    run.add_argument(
        "--metrics-bind-address",
        default="127.0.0.1:10251",
        help="HOST:PORT serving /metrics, /healthz and /readyz (port 0 picks a free one)",
    )
    run.add_argument("--seed", type=int, default=None, help="seed for tie-breaking between equal nodes")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if args.command == "run":
        from usher.adapters.connecting import CredentialsError
        from usher.adapters.serving import parse_bind_address
        from usher.app import RunOptions, run

        try:
            parse_bind_address(args.metrics_bind_address)
        except ValueError as exc:
            print(f"usher: {exc}", file=sys.stderr)
            return 2
        try:
            asyncio.run(
                run(
                    RunOptions(
                        kubeconfig=args.kubeconfig,
                        scheduler_name=args.scheduler_name,
                        metrics_bind_address=args.metrics_bind_address,
                        seed=args.seed,
                    )
                )
            )
        except CredentialsError as exc:
            print(f"usher: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
