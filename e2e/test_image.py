"""usher's image as `make image` builds it here, run the way the chart's Deployment runs it.

No registry and no Docker: the image comes from Debian root filesystems that debootstrap made
(e2e/image/build.sh) and runs under podman with Debian's runc. The pod spec is the one helm
rendered into the API server, translated by `e2e.image.podspec`: the chart's user, read-only root
filesystem, dropped capabilities and no-new-privileges, its ConfigMap and /tmp volumes, its args,
and a ServiceAccount token of the chart's ServiceAccount mounted where a kubelet mounts it, so
usher finds its credentials in-cluster. The assertions read the running process from /proc,
not podman's word for it.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e.controlplane import Cluster, ControlPlane, free_ports, wait_for
from e2e.image import CHART, podman, require_image
from e2e.image.podspec import podman_run_argv, security_args, service_account_dir
from e2e.pytest_plugin import EXTERNAL_KUBECONFIG_ENV
from e2e.test_chart import helm
from e2e.test_scheduling import pod_manifest, scheduled_events

pytestmark = pytest.mark.e2e

#: The chart's runAsUser and runAsGroup (values.yaml podSecurityContext).
NONROOT = 65532


def require_podman_image() -> str:
    """The image `make image` built; the kind path (e2e/kind.sh) builds its own with docker instead."""
    if os.environ.get(EXTERNAL_KUBECONFIG_ENV):
        pytest.skip("checks the image `make image` builds with podman; e2e/kind.sh builds and loads its own")
    return require_image()


def rendered_pod_spec(**values: Any) -> dict[str, Any]:
    text = helm("template", "r", str(CHART), *(f"--set={k}={v}" for k, v in values.items()))
    [deployment] = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment"]
    return dict(deployment["spec"]["template"]["spec"])


def test_the_image_is_the_charts_non_root_usher_and_small() -> None:
    image = require_podman_image()
    [inspected] = json.loads(podman("image", "inspect", image).stdout)
    assert inspected["Config"]["User"] == f"{NONROOT}:{NONROOT}"
    assert inspected["Config"]["Entrypoint"] == ["usher"]
    # 489 MB from a debootstrap base with pip and venv in the runtime; the runtime stage now has
    # python3 alone, and the virtualenv (the kubernetes client's sync and async code is most of it)
    # no pip.
    assert inspected["Size"] < 360e6, f"the image grew to {inspected['Size'] / 1e6:.0f} MB"


def test_usher_help_runs_in_the_image_with_the_charts_security_context() -> None:
    image = require_podman_image()
    pod = rendered_pod_spec()
    [container] = pod["containers"]
    flags = security_args(pod, container)
    assert {"--read-only", "--cap-drop", "ALL", "no-new-privileges", f"{NONROOT}:{NONROOT}"} <= set(flags)
    result = podman(
        "run", "--rm", "--pull", "never", "--network", "none", "--passwd=false", *flags, image, "--help", check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("usage: usher"), result.stdout
    assert "run" in result.stdout and "explain" in result.stdout


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def root_mount_options(pid: int) -> set[str]:
    """The mount options of the process's own root filesystem (from its mountinfo)."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return set(fields[5].split(","))
    raise AssertionError(f"no root mount in /proc/{pid}/mountinfo")


def metric(port: int, name: str, /, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


class Container:
    """A container of the image started with ``podman run -d``; removed (its log kept) on exit."""

    def __init__(self, name: str, log: Path) -> None:
        self.name = name
        self.log = log

    def state(self) -> dict[str, Any]:
        [inspected] = json.loads(podman("container", "inspect", self.name).stdout)
        return dict(inspected["State"])

    def running(self) -> bool:
        """True, or an AssertionError with the log's end when the container exited."""
        state = self.state()
        if not state["Running"]:
            logs = podman("logs", self.name, check=False)
            raise AssertionError(
                f"the container exited with {state['ExitCode']}:\n{(logs.stdout + logs.stderr)[-3000:]}"
            )
        return True

    def save_log(self) -> str:
        logs = podman("logs", self.name, check=False)
        self.log.write_text(logs.stdout + logs.stderr)
        return logs.stdout + logs.stderr


@pytest.fixture
def installed(
    control_plane: Cluster, namespace: str, test_id: str, tmp_path: Path
) -> Iterator[Callable[..., dict[str, Any]]]:
    """``install(**values)``: the chart installed by helm into the test's namespace; its Deployment's pod spec."""
    releases: list[str] = []

    def install(**values: Any) -> dict[str, Any]:
        release = f"img-{test_id}"[:40].rstrip("-")
        overrides = tmp_path / "values.yaml"
        overrides.write_text(yaml.safe_dump({"schedulerName": release, **values}))
        helm("install", release, str(CHART), "--namespace", namespace, "-f", str(overrides),
             kubeconfig=control_plane.kubeconfig)  # fmt: skip
        releases.append(release)
        apps = json.loads(control_plane.kubectl("get", "deployment", release, "-n", namespace, "-o", "json"))
        return dict(apps["spec"]["template"]["spec"]) | {"release": release}

    yield install
    for release in releases:
        helm("uninstall", release, "--namespace", namespace, "--wait", kubeconfig=control_plane.kubeconfig)


def test_the_image_schedules_with_the_charts_pod_spec_and_credentials(
    control_plane: Cluster,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    installed: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("runs the image on this machine's network, where only the local control plane's apiserver is")
    image = require_image()
    port = free_ports(1)[0]
    # No replica: no scheduler here would place the Deployment's pods, and podman runs its pod spec instead.
    pod = installed(replicaCount=0, metricsPort=port)
    release = pod.pop("release")
    configmap = next(v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v)
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    for key, data in control_plane.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{configmap}")[
        "data"
    ].items():
        (config_dir / key).write_text(data)
        (config_dir / key).chmod(0o644)
    config_dir.chmod(0o755)
    empty = tmp_path / "tmp"
    empty.mkdir(mode=0o1777)
    empty.chmod(0o1777)
    token = control_plane.kubectl("create", "token", pod["serviceAccountName"], "-n", namespace, "--duration=1h")
    account = service_account_dir(
        tmp_path / "serviceaccount",
        token=token.strip(),
        ca_certificate=control_plane.admin.ca_certificate.read_bytes(),
        namespace=namespace,
    )
    name = f"usher-{release}-{secrets.token_hex(3)}"
    argv = podman_run_argv(
        pod, name=name, image=image, volumes={"config": config_dir, "tmp": empty}, service_account=account,
        apiserver_port=control_plane.ports.apiserver, field_values={"metadata.name": name},
    )  # fmt: skip
    container = Container(name, control_plane.logs_dir / f"{name}.log")
    try:
        podman("run", "--detach", *argv)  # inside: a container that fails to start is still created
        wait_for(lambda: container.running() and ready(port), 60, f"usher's /readyz in the container {name}")
        pid = int(container.state()["Pid"])
        status = proc_status(pid)
        assert status["Uid"].split() == [str(NONROOT)] * 4
        assert status["Gid"].split() == [str(NONROOT)] * 4
        assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0" * 16
        assert status["NoNewPrivs"] == "1"
        assert status["Seccomp"] == "2", "the runtime's default seccomp filter"
        assert "ro" in root_mount_options(pid)

        node = kwok_nodes("n")
        core_api.create_namespaced_pod(namespace, pod_manifest("p", release))
        wait_for(lambda: core_api.read_namespaced_pod("p", namespace).spec.node_name == node, 60, "the pod bound")
        wait_for(lambda: scheduled_events(core_api, namespace, release)["p"] == 1, 30, "the Scheduled Event")
        assert metric(port, "leader_election_master_status", name=release) == 1
        assert metric(port, "scheduler_schedule_attempts_total", result="scheduled") == 1

        podman("stop", "--time", "20", name)
        assert container.state()["ExitCode"] == 0, "SIGTERM ends usher cleanly"
    finally:
        log = container.save_log()
        podman("rm", "--force", name, check=False)
    assert "(in-cluster service account)" in log, "usher found the mounted token as in a pod"
    assert "forbidden" not in log.lower(), log[-3000:]
