"""The Helm chart's least-privilege RBAC is enough for usher, checked by a real RBAC authorizer."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from e2e.controlplane import ControlPlane, cache_dir, read_versions, wait_for
from e2e.dra_driver import Driver, claim
from e2e.test_dra import claim_pod
from e2e.test_scheduling import pod_manifest
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent


def helm() -> Path:
    return cache_dir() / "bin" / read_versions()["HELM_VERSION"] / "helm"


def test_the_chart_lints() -> None:
    result = subprocess.run(
        [str(helm()), "lint", str(REPO / "charts" / "usher")], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_usher_schedules_with_only_the_charts_permissions(
    control_plane: ControlPlane,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    tmp_path: Path,
) -> None:
    release = f"rbac-{namespace}"[:50]
    rendered = subprocess.run(
        [
            str(helm()),
            "template",
            release,
            str(REPO / "charts" / "usher"),
            "--namespace",
            namespace,
            "--set",
            f"schedulerName={release}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    rbac = [d for d in docs if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    assert {d["kind"] for d in rbac} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    control_plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
    token = control_plane.kubectl("create", "token", release, "-n", namespace).strip()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": control_plane.server,
                            "certificate-authority": str(control_plane.pki.ca_crt),
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    node = kwok_nodes("n")
    driver = Driver(core_api.api_client, f"{release}-gpu")
    driver.publish_class()
    driver.publish_node(node, devices=1)
    driver.resource.create_namespaced_resource_claim(namespace, claim("gpu", driver.class_name))
    log = control_plane.logs_dir / f"usher-{release}.log"
    try:
        with UsherProcess(kubeconfig=kubeconfig, scheduler_name=release, log_path=log) as usher:
            usher.start()
            core_api.create_namespaced_pod(namespace, pod_manifest("p", release))
            core_api.create_namespaced_pod(namespace, claim_pod("with-device", release, claim_name="gpu"))
            wait_for(lambda: core_api.read_namespaced_pod("p", namespace).spec.node_name, 30, "the pod bound")
            wait_for(
                lambda: core_api.read_namespaced_pod("with-device", namespace).spec.node_name,
                30,
                "the pod with a device claim bound (claim finalizer, allocation and reservation written)",
            )
            events = kubernetes.client.EventsV1Api(core_api.api_client)
            wait_for(
                lambda: [e for e in events.list_namespaced_event(namespace).items if e.reason == "Scheduled"],
                30,
                "the Scheduled Event",
            )
            assert usher.terminate() == 0
    finally:
        driver.cleanup()
    text = log.read_text()
    assert "forbidden" not in text.lower(), text[-3000:]
