"""`make demo`: watch usher schedule pods.

With no KUBECONFIG set, a local control plane (etcd, kube-apiserver,
kube-controller-manager, kwok) is started on loopback and three kwok nodes
are created; with KUBECONFIG set, that cluster is used as it is (pass
``--kwok-nodes`` to add fake nodes when kwok runs there). Sample pods with
``schedulerName: usher`` are created in namespace ``usher-demo``, usher runs
as its own process, and the demo prints which pod went where and where the
metrics are. It keeps running until Ctrl-C (``--exit`` stops after the report).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config

from e2e.controlplane import Cluster, ExternalCluster, start, wait_for
from e2e.usher_process import UsherProcess

NAMESPACE = "usher-demo"
NODES = [("demo-node-a", "4", "8Gi"), ("demo-node-b", "2", "4Gi"), ("demo-node-c", "8", "16Gi")]
PODS = [("web", "500m", "256Mi", 4), ("worker", "1", "1Gi", 3), ("batch", "250m", "128Mi", 3)]


@contextlib.contextmanager
def cluster(local: bool, kwok_nodes: bool) -> Iterator[tuple[Path, Cluster | None]]:
    """The demo's kubeconfig, and the cluster when the demo makes kwok nodes in it.

    With KUBECONFIG set the cluster is wrapped only for ``--kwok-nodes``: the
    harness reads fewer kinds of kubeconfig (no exec plugins) than the
    Python client that does the rest.
    """
    if not local:
        kubeconfig = Path(os.environ["KUBECONFIG"])
        workdir = Path(tempfile.mkdtemp(prefix="usher-demo-")) if kwok_nodes else None
        yield kubeconfig, ExternalCluster.from_kubeconfig(kubeconfig, workdir) if workdir else None
        return
    workdir = Path(tempfile.mkdtemp(prefix="usher-demo-"))
    print(f"starting a local control plane in {workdir} ...", flush=True)
    plane = start(workdir)
    try:
        print(f"control plane ready in {plane.startup_seconds:.1f}s: export KUBECONFIG={plane.kubeconfig}")
        yield plane.kubeconfig, plane
    finally:
        plane.stop()


def pod_body(name: str, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name.rsplit("-", 1)[0]}},
        "spec": {
            "schedulerName": "usher",
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/demo:1",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exit", action="store_true", help="stop after printing the placements")
    parser.add_argument("--kwok-nodes", action="store_true", help="create kwok nodes on an existing cluster too")
    args = parser.parse_args(argv)
    local = not os.environ.get("KUBECONFIG")
    with cluster(local, args.kwok_nodes) as (kubeconfig, plane):
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))
        if plane is not None:
            for name, cpu, memory in NODES:
                plane.add_kwok_node(name, cpu=cpu, memory=memory, pods=110)
            print(f"nodes: {', '.join(f'{n} ({c} cpu, {m})' for n, c, m in NODES)}")
        with contextlib.suppress(kubernetes.client.ApiException):
            api.create_namespace({"metadata": {"name": NAMESPACE}})
        wait_for(
            lambda: api.list_namespaced_service_account(NAMESPACE, field_selector="metadata.name=default").items,
            30,
            "the demo namespace's default ServiceAccount",
        )
        log = Path(tempfile.gettempdir()) / f"usher-demo-{os.getpid()}.log"
        usher = UsherProcess(kubeconfig=kubeconfig, scheduler_name="usher", log_path=log).start()
        print(f"usher is running (log: {log}); metrics: {usher.url}/metrics", flush=True)
        names = []
        started = time.monotonic()
        for prefix, cpu, memory, count in PODS:
            for i in range(count):
                name = f"{prefix}-{i}"
                names.append(name)
                with contextlib.suppress(kubernetes.client.ApiException):
                    api.create_namespaced_pod(NAMESPACE, pod_body(name, cpu, memory))

        def placements() -> dict[str, str]:
            pods = api.list_namespaced_pod(NAMESPACE).items
            return {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}

        wait_for(lambda: len(placements()) >= len(names), 60, "the demo pods to be bound")
        took = time.monotonic() - started
        print(f"\n{len(names)} pods scheduled in {took:.2f}s:")
        for name, node in sorted(placements().items()):
            print(f"  {NAMESPACE}/{name:10s} -> {node}")
        attempts = usher.metric("scheduler_schedule_attempts_total", result="scheduled")
        print(f'\nscheduler_schedule_attempts_total{{result="scheduled"}} = {attempts:g}')
        print(f"metrics: curl {usher.url}/metrics    health: {usher.url}/healthz, {usher.url}/readyz")
        if not args.exit:
            print("\nusher keeps running: create pods with schedulerName: usher to see more. Ctrl-C stops.")
            stop = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait()
        code = usher.terminate()
        if not local:  # a local control plane is thrown away with its pods
            for name in names:
                with contextlib.suppress(kubernetes.client.ApiException):
                    api.delete_namespaced_pod(name, NAMESPACE)
        return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
