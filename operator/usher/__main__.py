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
    run.add_argument(
        "--config",
        help="KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1 subset); default: one profile",
    )
    run.add_argument(
        "--scheduler-name",
        default=None,
        help="spec.schedulerName of the pods to schedule, when no --config is given (default: usher)",
    )
    run.add_argument("--feature-gates", default="", help="Name=true|false,... (see README)")
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
        from usher.config import ConfigError, default_config, load_config, parse_feature_gates
        from usher.core.plugins.registry import in_tree_registry

        try:
            parse_bind_address(args.metrics_bind_address)
            if args.config and args.scheduler_name:
                raise ConfigError("--scheduler-name: set schedulerName in the --config profiles instead")
            config = (
                load_config(args.config, registry=in_tree_registry())
                if args.config
                else default_config(args.scheduler_name or "usher")
            )
            gates = parse_feature_gates(args.feature_gates)
        except ValueError as exc:
            print(f"usher: invalid configuration: {exc}", file=sys.stderr)
            return 2
        try:
            asyncio.run(
                run(
                    RunOptions(
                        config=config,
                        gates=gates,
                        kubeconfig=args.kubeconfig,
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
