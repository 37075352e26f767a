"""Command line: ``usher run``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from usher import __version__

if TYPE_CHECKING:
    from usher.app import RunOptions

logger = logging.getLogger("usher")

DEFAULT_METRICS_BIND_ADDRESS = "127.0.0.1:10251"
EVENT_LOOPS = ("uvloop", "asyncio")


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``usher run`` runs on; None: asyncio's default.

    uvloop (libuv under asyncio's API) is what kopf's own CLI runs on when installed. Every watch event,
    task switch, timer and socket write of usher goes through the loop; on uvloop an API call costs usher
    a few percent less CPU, and end to end the difference is within the benchmark's noise (bench/NOTES.md).
    """
    if name == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="usher", description="A secondary Kubernetes scheduler.")
    parser.add_argument("--version", action="version", version=f"usher {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="watch the cluster and schedule pods")
    run.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: the --config file's clientConnection.kubeconfig, in-cluster, then $KUBECONFIG)",
    )
    run.add_argument(
        "--config",
        help="KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1, see README); default: one profile",
    )
    run.add_argument(
        "--scheduler-name",
        default=None,
        help="spec.schedulerName of the pods to schedule, when no --config is given (default: usher)",
    )
    run.add_argument("--feature-gates", default="", help="Name=true|false,... (see README)")
    run.add_argument(
        "--metrics-bind-address",
        default=None,
        help="HOST:PORT serving /metrics, /healthz and /readyz (port 0 picks a free one); "
        f"default: the --config file's metricsBindAddress, else {DEFAULT_METRICS_BIND_ADDRESS}",
    )
    run.add_argument("--seed", type=int, default=None, help="seed for tie-breaking between equal nodes")
    run.add_argument(
        "--pre-enqueue-status-delay",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="delay before a PreEnqueue rejection is reported on the pod (NotReadyForScheduling); default 5",
    )
    run.add_argument(
        "--enable-debug-endpoints",
        action="store_true",
        help="serve /debug/queue and /debug/pods/NS/NAME (used by `usher explain`) on the metrics address",
    )
    election = run.add_argument_group("leader election (overrides the --config file's leaderElection)")
    election.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=None)
    election.add_argument("--leader-elect-resource-name", help="Lease name (default: the first scheduler name)")
    election.add_argument("--leader-elect-resource-namespace", help="Lease namespace (default: the pod's own)")
    election.add_argument("--leader-elect-lease-duration", type=float, metavar="SECONDS")
    election.add_argument("--leader-elect-renew-deadline", type=float, metavar="SECONDS")
    election.add_argument("--leader-elect-retry-period", type=float, metavar="SECONDS")
    run.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="uvloop",
        help="asyncio event loop implementation: uvloop (default, as kopf's CLI picks it) or asyncio's own",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    explain = commands.add_parser("explain", help="why is this pod pending? (asks a running usher)")
    explain.add_argument("pod", metavar="NAMESPACE/POD")
    explain.add_argument(
        "--address",
        default=DEFAULT_METRICS_BIND_ADDRESS,
        help="usher's --metrics-bind-address (started with --enable-debug-endpoints)",
    )
    explain.add_argument("--json", action="store_true", help="print the raw JSON report")
    return parser


def _explain(pod: str, address: str, as_json: bool) -> int:
    import json
    import urllib.error
    import urllib.request

    from usher.explaining import render

    namespace, sep, name = pod.partition("/")
    if not sep or not namespace or not name:
        print(f"usher explain: expected NAMESPACE/POD, got {pod!r}", file=sys.stderr)
        return 2
    url = f"http://{address}/debug/pods/{namespace}/{name}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            report = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        hint = " (start usher with --enable-debug-endpoints)" if exc.code == 404 else ""
        print(f"usher explain: {url}: HTTP {exc.code}{hint}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"usher explain: cannot reach usher at {address}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if as_json else render(report))
    return 0


def _lease(args: argparse.Namespace, config: Any) -> Any:
    """Leader election settings: the config file's leaderElection, with explicit flags winning; the result is
    checked once, each setting named by the flag or the field it came from."""
    from usher.adapters.leading import LeaseSettings, default_namespace
    from usher.config import check_leader_election

    section = config.leader_election
    enabled = section.leader_elect if args.leader_elect is None else args.leader_elect
    if not enabled:
        return None

    def chosen(flag: str, given: Any, field: str, value: Any) -> tuple[str, Any]:
        return (flag, given) if given is not None else (f"leaderElection.{field}", value)

    name = chosen(
        "--leader-elect-resource-name", args.leader_elect_resource_name, "resourceName", section.resource_name
    )
    namespace = chosen(
        "--leader-elect-resource-namespace",
        args.leader_elect_resource_namespace,
        "resourceNamespace",
        section.resource_namespace,
    )
    lease_duration = chosen(
        "--leader-elect-lease-duration", args.leader_elect_lease_duration, "leaseDuration", section.lease_duration
    )
    renew_deadline = chosen(
        "--leader-elect-renew-deadline", args.leader_elect_renew_deadline, "renewDeadline", section.renew_deadline
    )
    retry_period = chosen(
        "--leader-elect-retry-period", args.leader_elect_retry_period, "retryPeriod", section.retry_period
    )
    check_leader_election(
        name=name,
        namespace=namespace,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
    )
    return LeaseSettings(
        name=name[1] or config.scheduler_names[0],
        namespace=namespace[1] or default_namespace(),
        lease_duration=lease_duration[1],
        renew_deadline=renew_deadline[1],
        retry_period=retry_period[1],
    )


def run_options(args: argparse.Namespace) -> RunOptions:
    """``usher run``'s flags and ``--config`` file, validated without touching the cluster (ValueError if bad).

    Explicit flags win over the file's ``clientConnection.kubeconfig`` and
    ``metricsBindAddress``; every profile's plugins and args are checked here.
    """
    from usher.adapters.serving import parse_bind_address
    from usher.app import RunOptions
    from usher.config import ConfigError, check_scheduler_name, default_config, load_config
    from usher.core.plugins.registry import in_tree_registry
    from usher.features import parse_feature_gates

    if args.config and args.scheduler_name:
        raise ConfigError("--scheduler-name: set schedulerName in the --config profiles instead")
    if args.scheduler_name is not None:
        check_scheduler_name(args.scheduler_name, "--scheduler-name")
    if args.metrics_bind_address is not None:
        parse_bind_address(args.metrics_bind_address)
    config = (
        load_config(args.config, registry=in_tree_registry())
        if args.config
        else default_config(args.scheduler_name or "usher")
    )
    metrics_bind_address = args.metrics_bind_address or config.metrics_bind_address or DEFAULT_METRICS_BIND_ADDRESS
    try:
        parse_bind_address(metrics_bind_address)
    except ValueError as exc:
        raise ConfigError(f"metricsBindAddress: expected HOST:PORT, got {metrics_bind_address!r}") from exc
    gates = parse_feature_gates(args.feature_gates)
    delay = args.pre_enqueue_status_delay
    if not 0 <= delay < math.inf:
        raise ConfigError(f"--pre-enqueue-status-delay: must be a finite number of seconds >= 0, got {delay!r}")
    return RunOptions(
        config=config,
        gates=gates,
        kubeconfig=args.kubeconfig or config.client_connection.kubeconfig or None,
        metrics_bind_address=metrics_bind_address,
        seed=args.seed,
        status_delay=args.pre_enqueue_status_delay,
        debug_endpoints=args.enable_debug_endpoints,
        lease=_lease(args, config),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "verbose", False):
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if args.command == "explain":
        return _explain(args.pod, args.address, args.json)
    if args.command == "run":
        from usher.adapters.connecting import CredentialsError
        from usher.app import LeadershipLostError, run

        try:
            options = run_options(args)
        except ValueError as exc:
            print(f"usher: invalid configuration: {exc}", file=sys.stderr)
            return 2
        for ignored in options.config.ignored:
            logger.info("configuration: %s", ignored)
        try:
            with asyncio.Runner(loop_factory=loop_factory(args.event_loop)) as runner:
                runner.run(run(options))
        except CredentialsError as exc:
            print(f"usher: {exc}", file=sys.stderr)
            return 2
        except LeadershipLostError as exc:
            print(f"usher: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
