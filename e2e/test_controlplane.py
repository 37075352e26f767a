"""Tests of the e2e harness itself, against the real control plane.

Why: every other e2e test trusts that the harness gives it a realistic
cluster (RBAC on, kwok nodes that stay Ready, pods that run, the DRA claim
controller); these tests pin each of those facts, so a harness regression
fails here with a clear name instead of as a confusing scheduler failure.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import queue
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from e2e import controlplane
from e2e.controlplane import (
    ApiError,
    Binaries,
    Cluster,
    ComponentError,
    ExternalCluster,
    MissingBinaryError,
    RestartableControlPlane,
    WaitTimeoutError,
    wait_for,
)
from e2e.pytest_plugin import unique_name

REPO = Path(__file__).resolve().parent.parent


def _get(plane: Cluster, path: str) -> Any:
    """GET that maps 404 to None."""
    try:
        return plane.request("GET", path)
    except ApiError as error:
        if error.status == 404:
            return None
        raise


@pytest.fixture
def node_name(control_plane: Cluster) -> Iterator[str]:
    """A unique node name, and the node's deletion afterwards.

    The session's cluster is shared: a node left behind would take pods in
    later tests (any scheduler places pods on every Ready node).
    """
    name = unique_name("harness-node")
    yield name
    with contextlib.suppress(ApiError):
        control_plane.request("DELETE", f"/api/v1/nodes/{name}")


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            # Nobody schedules this name: only the test's explicit Binding places the pod.
            "schedulerName": "usher-e2e-nobody",
            "containers": [{"name": "main", "image": "registry.invalid/pause:1"}],
            **spec,
        },
    }


# --------------------------------------------------------------------------- without a cluster


def test_wait_for_returns_value_and_times_out() -> None:
    calls = iter([None, 0, "done"])
    assert wait_for(lambda: next(calls), 5, "a value", interval=0.001) == "done"
    with pytest.raises(WaitTimeoutError, match="waiting for the impossible"):
        wait_for(lambda: False, 0.05, "the impossible", interval=0.01)


def test_wait_for_ignores_only_listed_errors() -> None:
    def boom() -> bool:
        raise KeyError("x")

    with pytest.raises(WaitTimeoutError, match="KeyError"):
        wait_for(boom, 0.05, "boom", interval=0.01, ignore=(KeyError,))
    with pytest.raises(KeyError):
        wait_for(boom, 5, "boom", interval=0.01)


def test_missing_binary_names_it_and_the_build_command(tmp_path: Path) -> None:
    binaries = Binaries.locate(cache=tmp_path)
    with pytest.raises(MissingBinaryError, match=r"kube-apiserver at .*bash e2e/build-binaries\.sh"):
        binaries.require("etcd", "kube_apiserver")
    with pytest.raises(MissingBinaryError, match="kwok stage files"):
        binaries.require("kwok_stages")


def test_the_package_exports_what_it_lists() -> None:
    assert sorted(controlplane.__all__) == sorted(set(controlplane.__all__))
    for name in controlplane.__all__:
        assert getattr(controlplane, name) is not None, name


def test_unique_names_are_dns_labels() -> None:
    name = unique_name("e2e", "test_something[Param_1]" * 5)
    assert len(name) <= 63
    assert name.startswith("e2e-test-something-param-1-")
    assert name != unique_name("e2e", "test_something[Param_1]" * 5)


# --------------------------------------------------------------------------- the real thing


@pytest.mark.e2e
def test_apiserver_ready_and_rbac_enforced(control_plane: Cluster, namespace: str) -> None:
    assert control_plane.kubectl("get", "--raw", "/readyz").strip() == "ok"
    assert control_plane.kubectl("auth", "can-i", "list", "pods", "-n", namespace).strip() == "yes"
    can = control_plane.kubectl(
        "auth", "can-i", f"--as=system:serviceaccount:{namespace}:default", "list", "pods", "-n", namespace,
        check=False,
    )  # fmt: skip
    assert can.strip() == "no"

    # A real token of that ServiceAccount (signed with the service-account key) is
    # authenticated but not authorized.
    token = control_plane.kubectl("create", "token", "default", "-n", namespace).strip()
    context = ssl.create_default_context(cafile=str(control_plane.admin.ca_certificate))
    server = urllib.parse.urlsplit(control_plane.server)
    conn = http.client.HTTPSConnection(server.hostname or "", server.port, context=context, timeout=10)
    try:
        conn.request("GET", f"/api/v1/namespaces/{namespace}/pods", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        body = json.loads(response.read())
    finally:
        conn.close()
    assert response.status == 403, body
    assert f"system:serviceaccount:{namespace}:default" in body["message"]


@pytest.mark.e2e
def test_kwok_node_is_ready_untainted_and_renews_its_lease(control_plane: Cluster, node_name: str) -> None:
    name = node_name
    node = control_plane.add_kwok_node(name, cpu="8", memory="16Gi", pods=50, labels={"zone": "a"})
    assert node["metadata"]["annotations"][controlplane.KWOK_NODE_ANNOTATION] == "fake"
    assert node["metadata"]["labels"]["zone"] == "a"
    assert not node["spec"].get("taints"), "a kwok node must look like an ordinary node"
    assert node["status"]["allocatable"]["cpu"] == "8"
    assert node["status"]["allocatable"]["pods"] == "50"

    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
    first = control_plane.wait_for(lambda: _get(control_plane, lease_path), 30, f"lease of {name}")
    first_renew = first["spec"]["renewTime"]
    assert first["spec"]["leaseDurationSeconds"] == controlplane.NODE_LEASE_SECONDS
    # kwok renews every leaseDuration/4 (10 s), as a kubelet does.
    renewed = control_plane.wait_for(
        lambda: (lease := _get(control_plane, lease_path)) and lease["spec"]["renewTime"] != first_renew and lease,
        controlplane.NODE_LEASE_SECONDS / 2,
        f"lease of {name} to be renewed",
        interval=0.5,
    )
    assert renewed["spec"]["holderIdentity"] == first["spec"]["holderIdentity"]
    assert controlplane.node_ready(control_plane.request("GET", f"/api/v1/nodes/{name}"))


@pytest.mark.e2e
def test_pod_bound_to_kwok_node_runs_and_is_deleted(control_plane: Cluster, namespace: str, node_name: str) -> None:
    node = node_name
    control_plane.add_kwok_node(node)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    control_plane.request("POST", pods, _pod("p"))
    control_plane.request(
        "POST",
        f"{pods}/p/binding",
        {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": node}},
    )

    def running() -> dict[str, Any]:
        pod: dict[str, Any] = control_plane.request("GET", f"{pods}/p")
        return pod if pod["status"].get("phase") == "Running" else {}

    pod = control_plane.wait_for(running, 30, "pod p to be Running")
    assert pod["spec"]["nodeName"] == node
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(controlplane.POD_CIDR)

    # kwok's pod-delete stage plays the kubelet's part in graceful deletion.
    control_plane.request("DELETE", f"{pods}/p")
    control_plane.wait_for(lambda: _get(control_plane, f"{pods}/p") is None, 30, "pod p to be gone")


@pytest.mark.e2e
def test_resource_claim_template_yields_claim_and_pod_status(control_plane: Cluster, namespace: str) -> None:
    device_class = f"{namespace}.example.com"
    control_plane.request(
        "POST",
        "/apis/resource.k8s.io/v1/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
        },
    )
    try:
        control_plane.request(
            "POST",
            f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "gpu"},
                "spec": {
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}
                },
            },
        )
        pod = _pod("with-claim", resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "gpu"}])
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        control_plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)

        def claim_status() -> list[dict[str, Any]]:
            got = control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods/with-claim")
            return list(got["status"].get("resourceClaimStatuses") or [])

        statuses = control_plane.wait_for(claim_status, 30, "pod.status.resourceClaimStatuses")
        assert statuses[0]["name"] == "gpu"
        claim_name = statuses[0]["resourceClaimName"]
        claim = control_plane.request(
            "GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{claim_name}"
        )
        assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
        owner = claim["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Pod", "with-claim")
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == device_class
    finally:
        control_plane.request("DELETE", f"/apis/resource.k8s.io/v1/deviceclasses/{device_class}")


@pytest.mark.e2e
def test_an_external_cluster_by_kubeconfig_offers_the_same_operations(
    control_plane: Cluster, node_name: str, tmp_path: Path
) -> None:
    # The session's cluster seen through its kubeconfig only: the ExternalCluster code path, run for real.
    external = ExternalCluster.from_kubeconfig(control_plane.kubeconfig, tmp_path / "external")
    assert isinstance(external, Cluster)
    assert not isinstance(external, RestartableControlPlane)
    assert external.server == control_plane.server
    namespace = external.create_namespace(unique_name("external"), labels={"by": "external"})
    try:
        assert external.kubectl("get", "namespace", namespace, "-o", "jsonpath={.metadata.labels.by}") == "external"
        node = external.add_kwok_node(node_name, cpu="2")
        assert node["status"]["allocatable"]["cpu"] == "2"
        assert controlplane.node_ready(control_plane.request("GET", f"/api/v1/nodes/{node_name}"))
        assert external.wait_for(lambda: _get(external, f"/api/v1/namespaces/{namespace}"), 5, "the namespace")
    finally:
        control_plane.request("DELETE", f"/api/v1/namespaces/{namespace}")


@pytest.mark.e2e
def test_a_restarted_apiserver_serves_the_same_state(
    restartable_control_plane: RestartableControlPlane, namespace: str
) -> None:
    plane = restartable_control_plane
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    plane.request("POST", configmaps, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept"}})
    old = plane.component("kube-apiserver")

    new = plane.restart("kube-apiserver")

    assert old.process.poll() is not None
    assert new.alive() and new.process.pid != old.process.pid
    assert plane.component("kube-apiserver") is new
    assert plane.request("GET", f"{configmaps}/kept")["metadata"]["name"] == "kept"
    # Components that watch it (kcm, kwok) carry on: a new namespace still gets its ServiceAccount.
    plane.request("DELETE", f"/api/v1/namespaces/{plane.create_namespace(unique_name('after-restart'))}")


@pytest.mark.e2e
def test_two_more_control_planes_start_in_parallel_without_clashing(control_plane: Cluster, tmp_path: Path) -> None:
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(controlplane.start, tmp_path / name) for name in ("a", "b")]
        planes = [f.result() for f in futures]
    try:
        ports = [p for plane in planes for p in vars(plane.ports).values()]
        assert len(ports) == len(set(ports)), ports
        assert control_plane.server not in {plane.server for plane in planes}
        assert len({plane.kubeconfig for plane in [control_plane, *planes]}) == 3
        for index, plane in enumerate(planes):
            assert plane.is_running()
            assert plane.kubectl("get", "--raw", "/readyz").strip() == "ok"
            plane.add_kwok_node(f"parallel-{index}")
        for index, plane in enumerate(planes):
            # Each kwok manages only its own cluster's nodes; nothing leaked across.
            names = {n["metadata"]["name"] for n in plane.request("GET", "/api/v1/nodes")["items"]}
            assert names == {f"parallel-{index}"}
        assert _get(control_plane, "/api/v1/nodes/parallel-0") is None
    finally:
        processes = [c.process for plane in planes for c in plane.components]
        for plane in planes:
            plane.stop()
    assert all(p.poll() is not None for p in processes)
    for plane in planes:
        shutil.rmtree(plane.workdir / "etcd")  # tens of MB each; pytest keeps tmp dirs around


@pytest.mark.e2e
def test_component_failure_reports_its_log(tmp_path: Path) -> None:
    with pytest.raises(ComponentError, match=r"(?s)kube-apiserver exited.*unknown flag: --no-such-flag"):
        controlplane.start(tmp_path / "bad", extra_apiserver_args=["--no-such-flag"], kcm=False, kwok=False)
    with pytest.raises(controlplane.ControlPlaneError, match="already holds"):
        controlplane.start(tmp_path / "bad", kcm=False, kwok=False)
    shutil.rmtree(tmp_path / "bad" / "etcd")


def test_an_usher_that_never_gets_ready_is_not_left_running(tmp_path: Path) -> None:
    from e2e.usher_process import UsherProcess

    kubeconfig = tmp_path / "kubeconfig"  # a documentation-only address (RFC 5737): usher can never sync
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        'clusters: [{name: c, cluster: {server: "https://192.0.2.1:6443", insecure-skip-tls-verify: true}}]\n'
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    usher = UsherProcess(kubeconfig=kubeconfig, scheduler_name="usher", log_path=tmp_path / "usher.log")
    with pytest.raises(WaitTimeoutError, match="usher /readyz"):
        usher.start(ready_timeout=3)
    assert usher.process is not None and usher.process.poll() is not None, "usher was left running"


@pytest.mark.e2e
def test_cli_up_prints_kubeconfig_and_stops_on_sigint(tmp_path: Path) -> None:
    workdir = tmp_path / "cli"
    proc = subprocess.Popen(
        [sys.executable, "-m", "e2e.controlplane", "up", "--workdir", str(workdir), "--nodes", "1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    lines: queue.Queue[str] = queue.Queue()

    def read_stdout() -> None:
        # A thread, because select() on a buffered text pipe misses lines already read ahead.
        for line in proc.stdout or ():
            lines.put(line)

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    try:
        seen: list[str] = []
        while not any(line.startswith("export KUBECONFIG=") for line in seen):
            try:
                seen.append(lines.get(timeout=120))
            except queue.Empty:
                pytest.fail(f"no kubeconfig line from the CLI; output so far: {seen}")
        seen.append(lines.get(timeout=5))  # the line after it, printed with the same flush
        assert not any("Traceback" in line for line in seen), seen
        assert f"export KUBECONFIG={workdir / 'kubeconfig'}\n" in seen
        binaries = Binaries.locate()
        nodes = subprocess.run(
            [str(binaries.kubectl), f"--kubeconfig={workdir / 'kubeconfig'}", "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert nodes.strip() == "node/kwok-node-0"
        ports = json.loads((workdir / "ports.json").read_text())
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        reader.join(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    # Everything it started is gone: nothing listens on its ports any more.
    for port in ports.values():
        with pytest.raises(OSError):
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
    shutil.rmtree(workdir / "etcd")
