"""The Helm chart, installed with helm into the real API server, and usher running with only its permissions.

usher runs outside the cluster (no kubelet here) with a TokenRequest token
of the chart's ServiceAccount and the chart's own ConfigMap, so every call it
makes is authorised by the chart's RBAC through the real RBAC authorizer.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from e2e.controlplane import Cluster, cache_dir, read_versions, wait_for, write_kubeconfig
from e2e.dra_driver import Driver, claim, device_class, resource_slice
from e2e.test_dra import allocate_elsewhere, claim_pod, claims_in, extended_pod, only_on
from e2e.test_gangs import gang_member, pod_group, pod_group_conditions
from e2e.test_scheduling import assert_no_node_overcommitted, pod_manifest, scheduled_events
from e2e.usher_process import UsherProcess
from usher.config import parse_config
from usher.core.plugins.registry import in_tree_registry

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "usher"


def helm(*args: str, kubeconfig: Path | None = None) -> str:
    binary = cache_dir() / "bin" / read_versions()["HELM_VERSION"] / "helm"
    command = [str(binary), *args] + ([f"--kubeconfig={kubeconfig}"] if kubeconfig else [])
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize("values", sorted(p.name for p in (CHART / "ci").glob("*-values.yaml")))
def test_the_chart_lints_and_renders_a_configuration_usher_accepts(values: str) -> None:
    helm("lint", str(CHART), "-f", str(CHART / "ci" / values), "--strict")
    rendered = [d for d in yaml.safe_load_all(helm("template", "r", str(CHART), "-f", str(CHART / "ci" / values))) if d]
    [configmap] = [d for d in rendered if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config")]
    config = parse_config(yaml.safe_load(configmap["data"]["config.yaml"]), registry=in_tree_registry())
    assert config.scheduler_names
    [deployment] = [d for d in rendered if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "--config=/etc/usher/config.yaml" in container["args"]


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_replicas_are_spread_over_nodes_and_drained_one_at_a_time(replicas: int, tmp_path: Path) -> None:
    """With more than one replica: a soft spread over nodes (never a reason to stay Pending) and a
    PodDisruptionBudget letting voluntary evictions take one replica at a time; one replica gets neither."""
    rendered = [
        d for d in yaml.safe_load_all(helm("template", "r", str(CHART), "--set", f"replicaCount={replicas}")) if d
    ]
    [deployment] = [d for d in rendered if d["kind"] == "Deployment"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    budgets = [d for d in rendered if d["kind"] == "PodDisruptionBudget"]
    spread = deployment["spec"]["template"]["spec"].get("topologySpreadConstraints")
    if replicas == 1:
        assert budgets == [] and spread is None
        return
    [budget] = budgets
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    assert spread == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
    ]
    custom = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}]
    values = yaml.safe_dump({"replicaCount": replicas, "topologySpreadConstraints": custom})
    path = tmp_path / "spread-values.yaml"
    path.write_text(values)
    [deployment] = [
        d
        for d in yaml.safe_load_all(helm("template", "r", str(CHART), "-f", str(path)))
        if d and d["kind"] == "Deployment"
    ]
    assert deployment["spec"]["template"]["spec"]["topologySpreadConstraints"] == custom, "the values' own spread wins"


def test_the_prometheus_rules_are_valid() -> None:
    rendered = helm("template", "r", str(CHART), "-f", str(CHART / "ci" / "full-values.yaml"))
    [rule] = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "PrometheusRule"]
    promtool = Path("/usr/bin/promtool")
    if not promtool.exists():
        pytest.fail("promtool is missing: .ci/run installs Debian's prometheus package (apt-get install prometheus)")
    rules = Path("/tmp") / f"usher-rules-{id(rule)}.yaml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run([str(promtool), "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 4 rules found" in result.stdout


def test_the_committed_install_manifest_is_the_rendered_chart() -> None:
    rendered = helm("template", "usher", str(CHART), "--namespace", "usher-system")
    committed = (REPO / "manifests" / "install.yaml").read_text()
    assert rendered == committed, "manifests/install.yaml drifted from the chart: run `make manifests`"


class Installed:
    """A chart release in the harness and what usher needs to run as its ServiceAccount."""

    def __init__(self, control_plane: Cluster, namespace: str, release: str, tmp_path: Path) -> None:
        self.control_plane = control_plane
        self.namespace = namespace
        self.release = release
        self.tmp_path = tmp_path

    def install(self, **values: Any) -> None:
        overrides = self.tmp_path / "values.yaml"
        overrides.write_text(yaml.safe_dump({"schedulerName": self.release, **values}))
        helm(
            "install",
            self.release,
            str(CHART),
            "--namespace",
            self.namespace,
            "-f",
            str(overrides),
            kubeconfig=self.control_plane.kubeconfig,
        )

    def kubeconfig(self) -> Path:
        token = self.control_plane.kubectl(
            "create", "token", self.release, "-n", self.namespace, "--duration=1h"
        ).strip()
        return write_kubeconfig(
            self.tmp_path / "sa-kubeconfig",
            server=self.control_plane.server,
            user=self.release,
            ca=self.control_plane.admin.ca_certificate,
            token=token,
        )

    def config(self) -> Path:
        data = yaml.safe_load(
            self.control_plane.kubectl("get", "configmap", f"{self.release}-config", "-n", self.namespace, "-o", "yaml")
        )
        path = self.tmp_path / "config.yaml"
        path.write_text(data["data"]["config.yaml"])
        return path

    def usher(self, name: str, *extra: str) -> UsherProcess:
        log = self.control_plane.logs_dir / f"usher-{self.release}-{name}.log"
        return UsherProcess(
            kubeconfig=self.kubeconfig(),
            scheduler_name=self.release,
            log_path=log,
            extra_args=("--config", str(self.config()), *extra),
            env={"POD_NAME": name},
        )


@pytest.fixture
def release(control_plane: Cluster, namespace: str, test_id: str, tmp_path: Path) -> Iterator[Installed]:
    installed = Installed(control_plane, namespace, f"u-{test_id}"[:40].rstrip("-"), tmp_path)
    yield installed
    for kind in ("clusterrole", "clusterrolebinding"):
        control_plane.kubectl("delete", kind, installed.release, "--ignore-not-found")


def test_usher_schedules_with_only_the_charts_permissions(
    control_plane: Cluster,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    release: Installed,
) -> None:
    release.install(replicaCount=1, leaderElection={"enabled": False})
    node = kwok_nodes("n")
    driver = Driver(core_api.api_client, f"{release.release}-gpu")
    driver.publish_class()
    driver.publish_node(node, devices=1)
    driver.resource.create_namespaced_resource_claim(namespace, claim("gpu", driver.class_name))
    serve_extended_resource(driver, kwok_nodes("extended"), namespace)
    process = release.usher("only")
    try:
        with process:
            process.start()
            core_api.create_namespaced_pod(namespace, pod_manifest("p", release.release))
            core_api.create_namespaced_pod(namespace, claim_pod("with-device", release.release, claim_name="gpu"))
            core_api.create_namespaced_pod(
                namespace, extended_pod("extended", release.release, extended_resource(namespace), 1)
            )
            core_api.create_namespaced_pod(namespace, pod_manifest("too-big", release.release, cpu="100"))
            scheduling = kubernetes.client.SchedulingV1beta1Api(core_api.api_client)
            scheduling.create_namespaced_pod_group(namespace, pod_group("gang", 1))
            core_api.create_namespaced_pod(namespace, gang_member("member", release.release, "gang", cpu="100m"))
            wait_for(lambda: core_api.read_namespaced_pod("p", namespace).spec.node_name, 30, "the pod bound")
            wait_for(
                lambda: [c["status"] for c in pod_group_conditions(core_api, namespace, "gang")] == ["True"],
                30,
                "the gang's pod bound and its PodGroup's condition written (podgroups/status)",
            )
            wait_for(
                lambda: core_api.read_namespaced_pod("with-device", namespace).spec.node_name,
                30,
                "the pod with a device claim bound (claim finalizer, allocation and reservation written)",
            )
            wait_for(
                lambda: core_api.read_namespaced_pod("extended", namespace).spec.node_name,
                30,
                "the pod asking for a DRA-served extended resource bound (its claim created)",
            )
            wait_for(
                lambda: any(
                    c.reason == "Unschedulable"
                    for c in core_api.read_namespaced_pod("too-big", namespace).status.conditions or []
                ),
                30,
                "the Unschedulable condition patched (pods/status)",
            )
            wait_for(
                lambda: scheduled_events(core_api, namespace, release.release)["p"] == 1, 30, "the Scheduled Event"
            )
            assert process.metric("leader_election_master_status", name=release.release) == 1, (
                "without leader election this instance always leads"
            )
            assert process.terminate() == 0
    finally:
        driver.cleanup()
    text = process.log_path.read_text()
    assert "forbidden" not in text.lower(), text[-3000:]


def extended_resource(namespace: str) -> str:
    return f"e2e.usher.dev/{namespace[-50:]}"


def serve_extended_resource(driver: Driver, node: str, namespace: str) -> None:
    """A second DeviceClass of the driver's that serves `extended_resource` (DRAExtendedResource), and a device
    on ``node``: a pod asking for the resource gets a claim usher makes for it."""
    served = f"{driver.class_name}-extended"
    body = device_class(served)
    body["spec"]["extendedResourceName"] = extended_resource(namespace)
    driver.resource.create_device_class(body)  # type: ignore[arg-type]  # a dict body is sent as is
    driver.classes.append(served)
    driver.publish(resource_slice(f"{node}-extended", node, devices=[{"name": "gpu-x"}]))


@dataclass(frozen=True)
class Needed:
    """A rule of the chart's RBAC, and what goes wrong without it."""

    kind: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    symptom: str
    """unready: usher cannot list what it must cache; binding, condition, device, extended, deallocation, event,
    preemption, volume, podgroup: that write fails; lease: this instance never leads; lease-create: a deleted
    Lease is never re-created, so this instance never leads."""

    @property
    def key(self) -> tuple[str, frozenset[str], frozenset[str]]:
        return (self.kind, frozenset(self.resources), frozenset(self.verbs))


NEEDED = {
    "without pods and nodes get/list/watch usher never gets ready": Needed(
        "ClusterRole", ("pods", "nodes"), ("get", "list", "watch"), "unready"
    ),
    "without namespaces list/watch usher never gets ready": Needed(
        "ClusterRole", ("namespaces",), ("list", "watch"), "unready"
    ),
    "without services list/watch usher never gets ready": Needed(
        "ClusterRole", ("services",), ("list", "watch"), "unready"
    ),
    "without pods/binding create nothing is bound": Needed("ClusterRole", ("pods/binding",), ("create",), "binding"),
    "without pods/status patch no condition is written": Needed(
        "ClusterRole", ("pods/status",), ("patch",), "condition"
    ),
    "without pods delete no victim is preempted": Needed("ClusterRole", ("pods",), ("delete",), "preemption"),
    "without poddisruptionbudgets list/watch usher never gets ready": Needed(
        "ClusterRole", ("poddisruptionbudgets",), ("list", "watch"), "unready"
    ),
    "without resourceclaims get/list/watch/update usher never gets ready": Needed(
        "ClusterRole", ("resourceclaims",), ("get", "list", "watch", "update"), "unready"
    ),
    "without resourceclaims create/delete a pod asking for a DRA-served extended resource is never bound": Needed(
        "ClusterRole", ("resourceclaims",), ("create", "delete"), "extended"
    ),
    "without resourceclaims/status update no claim is allocated": Needed(
        "ClusterRole", ("resourceclaims/status",), ("update",), "device"
    ),
    "without resourceclaims/status patch a claim allocated where its pod cannot go stays there": Needed(
        "ClusterRole", ("resourceclaims/status",), ("patch",), "deallocation"
    ),
    "without resourceclaims/binding update no claim is allocated": Needed(
        "ClusterRole", ("resourceclaims/binding",), ("update",), "device"
    ),
    "without resourceslices and deviceclasses list/watch usher never gets ready": Needed(
        "ClusterRole", ("resourceslices", "deviceclasses"), ("list", "watch"), "unready"
    ),
    "without devicetaintrules list/watch usher never gets ready": Needed(
        "ClusterRole", ("devicetaintrules",), ("list", "watch"), "unready"
    ),
    "without persistentvolumeclaims and persistentvolumes list/watch usher never gets ready": Needed(
        "ClusterRole", ("persistentvolumeclaims", "persistentvolumes"), ("list", "watch"), "unready"
    ),
    "without persistentvolumeclaims update no volume is provisioned": Needed(
        "ClusterRole", ("persistentvolumeclaims",), ("update",), "volume"
    ),
    "without persistentvolumes update no volume is bound": Needed(
        "ClusterRole", ("persistentvolumes",), ("update",), "volume"
    ),
    "without storage classes and CSI objects list/watch usher never gets ready": Needed(
        "ClusterRole",
        ("storageclasses", "csinodes", "csidrivers", "csistoragecapacities"),
        ("list", "watch"),
        "unready",
    ),
    "without podgroups and workloads list/watch usher never gets ready": Needed(
        "ClusterRole", ("podgroups", "workloads"), ("list", "watch"), "unready"
    ),
    "without podgroups/status patch no PodGroup condition is written": Needed(
        "ClusterRole", ("podgroups/status",), ("patch",), "podgroup"
    ),
    "without events create no Scheduled event is recorded": Needed("ClusterRole", ("events",), ("create",), "event"),
    "without get/update of its own Lease usher never leads": Needed("Role", ("leases",), ("get", "update"), "lease"),
    "without leases create a deleted Lease is never re-created": Needed(
        "Role", ("leases",), ("create",), "lease-create"
    ),
}


def test_the_rule_table_covers_every_rule_the_chart_grants() -> None:
    rendered = [d for d in yaml.safe_load_all(helm("template", "r", str(CHART))) if d]
    granted = {
        (d["kind"], frozenset(rule["resources"]), frozenset(rule["verbs"]))
        for d in rendered
        if d["kind"] in ("ClusterRole", "Role")
        for rule in d["rules"]
    }
    assert granted == {needed.key for needed in NEEDED.values()}


def forbidden(needed: Needed, log: str) -> bool:
    """The API server's RBAC denial of one of the rule's verbs on one of its resources, as usher logged it."""
    return any(f'cannot {verb} resource "{resource}"' in log for verb in needed.verbs for resource in needed.resources)


@pytest.mark.parametrize("needed", list(NEEDED.values()), ids=list(NEEDED))
def test_every_rule_of_the_charts_rbac_is_needed(
    control_plane: Cluster,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    release: Installed,
    needed: Needed,
    priority_classes: Callable[[int], str],
) -> None:
    """Each case removes one rule from the installed ClusterRole or Role and runs usher with what is left.

    One usher process per removed rule, all against the session's one control
    plane (each case costs a helm install and a usher start, a few seconds):
    only a real run shows that usher actually calls what a rule grants and that
    its absence is visible, both in the log (the API server's denial, naming the
    verb and resource) and in the cluster (usher not ready, a pod not bound, no
    condition, no Event, no leader). A SubjectAccessReview would only restate
    the rule. ``test_the_rule_table_covers_every_rule_the_chart_grants`` keeps
    the table in step with the chart.
    """
    release.install(replicaCount=1, leaderElection={"enabled": needed.kind == "Role"})
    rbac = kubernetes.client.RbacAuthorizationV1Api(core_api.api_client)
    if needed.kind == "ClusterRole":
        role = rbac.read_cluster_role(release.release)
    else:
        role = rbac.read_namespaced_role(f"{release.release}-leader-election", namespace)
    kept = [r for r in role.rules if (needed.kind, frozenset(r.resources), frozenset(r.verbs)) != needed.key]
    assert len(kept) == len(role.rules) - 1, f"the chart grants {needed} in exactly one rule"
    role.rules = kept
    if needed.kind == "ClusterRole":
        rbac.replace_cluster_role(release.release, role)
    else:
        rbac.replace_namespaced_role(role.metadata.name, namespace, role)
    if needed.symptom == "lease-create":  # deleted before usher starts: it waits a lease duration, then creates
        kubernetes.client.CoordinationV1Api(core_api.api_client).delete_namespaced_lease(release.release, namespace)
    node = kwok_nodes("n", cpu="2")
    driver = Driver(core_api.api_client, f"{release.release}-gpu")
    cleanup: list[Callable[[], None]] = []
    process = release.usher("limited")
    try:
        with process:
            process.start(wait_ready=needed.symptom != "unready")
            if needed.symptom == "device":
                driver.publish_class()
                driver.publish_node(node, devices=1)
                driver.resource.create_namespaced_resource_claim(namespace, claim("gpu", driver.class_name))
                core_api.create_namespaced_pod(namespace, claim_pod("p", release.release, claim_name="gpu"))
            elif needed.symptom == "extended":
                driver.publish_class()
                serve_extended_resource(driver, node, namespace)
                core_api.create_namespaced_pod(
                    namespace, extended_pod("p", release.release, extended_resource(namespace), 1)
                )
            elif needed.symptom == "deallocation":
                driver.publish_class()
                elsewhere = kwok_nodes("elsewhere")
                for each in (node, elsewhere):
                    driver.publish_node(each, devices=1)
                driver.resource.create_namespaced_resource_claim(namespace, claim("gpu", driver.class_name))
                allocate_elsewhere(driver.resource, namespace, "gpu", elsewhere)
                pinned = claim_pod("p", release.release, claim_name="gpu")
                pinned["spec"]["affinity"] = only_on(node)
                core_api.create_namespaced_pod(namespace, pinned)
            elif needed.symptom == "condition":
                core_api.create_namespaced_pod(namespace, pod_manifest("p", release.release, cpu="100"))
            elif needed.symptom == "preemption":
                victim = pod_manifest("victim", release.release, cpu="1500m")
                victim["spec"]["nodeName"] = node
                core_api.create_namespaced_pod(namespace, victim)
                preemptor = pod_manifest("p", release.release, cpu="1")
                preemptor["spec"]["priorityClassName"] = priority_classes(1000)
                core_api.create_namespaced_pod(namespace, preemptor)
            elif needed.symptom == "volume":
                static = "persistentvolumes" in needed.resources
                cleanup.append(volume_for(core_api, namespace, static=static))
                with_claim = pod_manifest("p", release.release)
                with_claim["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
                core_api.create_namespaced_pod(namespace, with_claim)
            elif needed.symptom == "podgroup":
                scheduling = kubernetes.client.SchedulingV1beta1Api(core_api.api_client)
                scheduling.create_namespaced_pod_group(namespace, pod_group("gang", 1))
                core_api.create_namespaced_pod(namespace, gang_member("p", release.release, "gang"))
            elif needed.symptom != "unready":
                core_api.create_namespaced_pod(namespace, pod_manifest("p", release.release))
            wait_for(lambda: forbidden(needed, process.log_path.read_text()), 60, f"usher to be denied {needed}")

            def pod() -> kubernetes.client.V1Pod:
                return core_api.read_namespaced_pod("p", namespace)

            if needed.symptom == "unready":
                assert process.get("/readyz")[0] != 200
            elif needed.symptom == "condition":
                assert not pod().status.conditions
            elif needed.symptom == "event":
                wait_for(lambda: pod().spec.node_name, 30, "the pod bound all the same")
                assert scheduled_events(core_api, namespace, release.release)["p"] == 0
            elif needed.symptom == "podgroup":
                wait_for(lambda: pod().spec.node_name, 30, "the gang's pod bound all the same")
                assert not pod_group_conditions(core_api, namespace, "gang")
            else:
                assert pod().spec.node_name is None
            if needed.symptom == "preemption":
                assert core_api.read_namespaced_pod("victim", namespace).metadata.deletion_timestamp is None
            if needed.symptom == "deallocation":
                (kept,) = claims_in(driver.resource, namespace)
                assert [r["pool"] for r in kept["status"]["allocation"]["devices"]["results"]] == [elsewhere]
            if needed.symptom in ("lease", "lease-create"):
                assert process.metric("leader_election_master_status", name=release.release) == 0
                assert process.metric("scheduler_schedule_attempts_total") == 0
    finally:
        if driver.slices:
            driver.cleanup()
        for undo in cleanup:
            undo()


def volume_for(core_api: kubernetes.client.CoreV1Api, namespace: str, *, static: bool) -> Callable[[], None]:
    """A claim "data" in a WaitForFirstConsumer class: with ``static``, an available PV for it (PreBind
    binds it: a PV update), else a provisioner's class (PreBind selects the node: a PVC update). Returns
    how to delete the cluster-scoped objects."""
    storage = kubernetes.client.StorageV1Api(core_api.api_client)
    class_name = f"{namespace}-{'static' if static else 'dynamic'}"
    storage.create_storage_class(
        kubernetes.client.V1StorageClass(
            metadata=kubernetes.client.V1ObjectMeta(name=class_name),
            provisioner="kubernetes.io/no-provisioner" if static else "example.com/never-runs",
            volume_binding_mode="WaitForFirstConsumer",
        )
    )
    volume = f"{namespace}-pv"
    if static:
        core_api.create_persistent_volume(
            {
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class_name,
                    "hostPath": {"path": "/tmp/usher-chart-test"},
                },
            }
        )
        wait_for(
            lambda: core_api.read_persistent_volume(volume).status.phase == "Available",
            60,
            "the PV controller to make the volume Available",
        )
    core_api.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": class_name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )

    def undo() -> None:
        storage.delete_storage_class(class_name)
        if static:
            core_api.delete_persistent_volume(volume)

    return undo


def test_two_replicas_lose_and_double_bind_nothing_when_the_leader_dies_mid_burst(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    release: Installed,
) -> None:
    release.install(leaderElection={"enabled": True, "leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"})
    nodes = [kwok_nodes(f"n{i}", cpu="32", memory="64Gi", pods=110) for i in range(4)]
    first, second = release.usher("replica-a"), release.usher("replica-b")
    with first, second:
        first.start()
        second.start()
        coordination = kubernetes.client.CoordinationV1Api(core_api.api_client)
        holder = wait_for(
            lambda: coordination.read_namespaced_lease(release.release, namespace).spec.holder_identity,
            30,
            "a leader",
            ignore=(kubernetes.client.ApiException,),
        )
        leader, follower = (first, second) if holder.startswith("replica-a") else (second, first)
        for i in range(150):
            core_api.create_namespaced_pod(namespace, pod_manifest(f"p{i:03d}", release.release, cpu="100m"))

        def bound() -> int:
            return sum(1 for p in core_api.list_namespaced_pod(namespace).items if p.spec.node_name)

        wait_for(lambda: bound() >= 50, 60, "the first pods bound by the leader")
        assert follower.metric("scheduler_schedule_attempts_total") == 0, "a follower never schedules"
        leader.kill()
        # The burst goes on while the lease changes hands.
        for i in range(150, 300):
            core_api.create_namespaced_pod(namespace, pod_manifest(f"p{i:03d}", release.release, cpu="100m"))
        wait_for(lambda: bound() == 300, 120, "every pod bound after the leader died")
        assert follower.metric("scheduler_schedule_attempts_total", result="scheduled") > 0, "the follower took over"
        events: Counter[str] = scheduled_events(core_api, namespace, release.release)
        assert max(events.values()) == 1, f"a pod was bound twice: {events.most_common(3)}"
        assert_no_node_overcommitted(core_api, nodes)
