"""Extended resources backed by DeviceClasses: which class serves a resource, and the claim a pod gets.

The request and mapping cases are kube-scheduler v1.37's own
(``Test_createRequestsAndMappings_requests`` and ``_mappings`` in
pkg/scheduler/framework/plugins/dynamicresources), with its pods built alike:
regular containers ``con<i>``, init containers ``init-con<i>`` and sidecars
``sidecar-con<i>``, numbered by their place in their list.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.dra.builders import make_class
from usher.core.dra.extended import (
    IMPLICIT_PREFIX,
    RequestMapping,
    claim_object,
    classes_by_resource,
    extended_requests,
    is_extended_name,
)
from usher.core.dra.model import EXTENDED_CLAIM_ANNOTATION, parse_claim, parse_class
from usher.core.dra.state import DraState

GPU = "example.com/gpu"
GPU1 = GPU + "1"
INIT = GPU + "init"
IMPLICIT_INIT = IMPLICIT_PREFIX + "classInit"


class Pod:
    """kube-scheduler's st.MakePod() as these cases use it."""

    def __init__(self) -> None:
        self.raw: dict[str, Any] = {
            "metadata": {"name": "pod", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "initContainers": []},
        }

    def res(self, **requests: str) -> Pod:
        containers = self.raw["spec"]["containers"]
        containers.append({"name": f"con{len(containers)}", "resources": {"requests": _names(requests)}})
        return self

    def init(self, *, sidecar: bool = False, **requests: str) -> Pod:
        inits = self.raw["spec"]["initContainers"]
        container: dict[str, Any] = {
            "name": f"{'sidecar' if sidecar else 'init'}-con{len(inits)}",
            "resources": {"requests": _names(requests)},
        }
        if sidecar:
            container["restartPolicy"] = "Always"
        inits.append(container)
        return self


def _names(requests: dict[str, str]) -> dict[str, str]:
    """Keyword names stand for the resources: gpu, gpu1, init, implicit_init."""
    names = {"gpu": GPU, "gpu1": GPU1, "init": INIT, "implicit_init": IMPLICIT_INIT}
    return {names[k]: v for k, v in requests.items()}


ONE = {GPU: "class"}
TWO = {GPU: "class", GPU1: "class1"}
INITS = {GPU: "class", INIT: "classInit", IMPLICIT_INIT: "classInit"}

pod1 = Pod().res(gpu="1", gpu1="2")
pod2 = Pod().res(gpu="1").res(gpu1="2")
pod_init = Pod().res(gpu="1").init(init="2")
pod_init2 = Pod().res(gpu="1").init(init="1").init(init="2")
pod_init3 = Pod().res(gpu="1").init(init="1").init(sidecar=True, init="1").init(init="2")
pod1_init_implicit = Pod().init(init="1", implicit_init="2")
pod_init_implicit = Pod().res(gpu="1").init(init="1").init(implicit_init="2")


@pytest.mark.parametrize(
    ("pod", "resources", "classes", "want"),
    [
        pytest.param(pod1, {}, {}, [], id="nil"),
        pytest.param(pod1, {GPU}, ONE, [("container-0-request-0", "class", 1)], id="one resource match"),
        pytest.param(pod1, {GPU, GPU1}, ONE, [("container-0-request-0", "class", 1)], id="one resource match, one not"),
        pytest.param(
            pod1,
            {GPU, GPU1},
            TWO,
            [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)],
            id="two resources match",
        ),
        pytest.param(
            pod2,
            {GPU, GPU1},
            TWO,
            [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)],
            id="two containers match",
        ),
        pytest.param(
            pod_init,
            {GPU, INIT},
            INITS,
            [("container-0-request-0", "classInit", 2), ("container-1-request-0", "class", 1)],
            id="one init container, one regular container",
        ),
        pytest.param(
            pod_init2,
            {GPU, INIT},
            INITS,
            [("container-1-request-0", "classInit", 2), ("container-2-request-0", "class", 1)],
            id="two init containers, one regular container",
        ),
        pytest.param(
            pod_init3,
            {GPU, INIT},
            INITS,
            [
                ("container-1-request-0", "classInit", 1),
                ("container-2-request-0", "classInit", 2),
                ("container-3-request-0", "class", 1),
            ],
            id="three init containers, one sidecar, one regular container",
        ),
    ],
)
def test_requests_as_kube_scheduler_makes_them(
    pod: Pod, resources: set[str], classes: dict[str, str], want: list[tuple[str, str, int]]
) -> None:
    requests, _ = extended_requests(pod.raw, resources, classes)
    assert [(r.name, r.class_name, r.count) for r in requests] == want


@pytest.mark.parametrize(
    ("pod", "resources", "classes", "want"),
    [
        pytest.param(
            pod1,
            {GPU, GPU1},
            TWO,
            [("con0", GPU, "container-0-request-0"), ("con0", GPU1, "container-0-request-1")],
            id="one container, two requests",
        ),
        pytest.param(
            pod1_init_implicit,
            {GPU, INIT, IMPLICIT_INIT},
            INITS,
            [("init-con0", IMPLICIT_INIT, "container-0-request-0"), ("init-con0", INIT, "container-0-request-1")],
            id="one container, one explicit and one implicit request",
        ),
        pytest.param(
            pod2,
            {GPU, GPU1},
            TWO,
            [("con0", GPU, "container-0-request-0"), ("con1", GPU1, "container-1-request-0")],
            id="two containers, two requests",
        ),
        pytest.param(
            pod_init,
            {GPU, INIT},
            INITS,
            [("init-con0", INIT, "container-0-request-0"), ("con0", GPU, "container-1-request-0")],
            id="one init container, one regular container, one request",
        ),
        pytest.param(
            pod_init2,
            {GPU, INIT},
            INITS,
            [
                ("init-con0", INIT, "container-1-request-0"),
                ("init-con1", INIT, "container-1-request-0"),
                ("con0", GPU, "container-2-request-0"),
            ],
            id="three containers (two are init containers), two requests",
        ),
        pytest.param(
            pod_init_implicit,
            {GPU, INIT, IMPLICIT_INIT},
            INITS,
            [
                ("init-con0", INIT, "container-0-request-0"),
                ("init-con1", IMPLICIT_INIT, "container-1-request-0"),
                ("con0", GPU, "container-2-request-0"),
            ],
            id="three containers (two are init containers), explicit and implicit resources",
        ),
        pytest.param(
            pod_init3,
            {GPU, INIT},
            INITS,
            [
                ("init-con0", INIT, "container-1-request-0"),
                ("sidecar-con1", INIT, "container-1-request-0"),
                ("init-con2", INIT, "container-2-request-0"),
                ("con0", GPU, "container-3-request-0"),
            ],
            id="four containers (two init containers, one sidecar), three requests",
        ),
    ],
)
def test_mappings_as_kube_scheduler_makes_them(
    pod: Pod, resources: set[str], classes: dict[str, str], want: list[tuple[str, str, str]]
) -> None:
    _, mappings = extended_requests(pod.raw, resources, classes)
    # Compared in kube's test order: by request name, then container name.
    got = sorted(mappings, key=lambda m: (m.request, m.container))
    assert got == [RequestMapping(*w) for w in want]


def test_an_init_container_reuses_the_devices_of_the_containers_after_it() -> None:
    """An ordinary init container runs before the long-lived ones start: their devices serve it, and it asks
    only for what they lack; a quantity that is no whole number asks for nothing (kube's AsInt64 fails)."""
    pod = Pod().init(gpu="3").res(gpu="1").res(gpu="1")
    requests, mappings = extended_requests(pod.raw, {GPU}, ONE)
    assert [(r.name, r.count) for r in requests] == [
        ("container-0-request-0", 1),
        ("container-1-request-0", 1),
        ("container-2-request-0", 1),
    ]
    assert [m.request for m in mappings if m.container == "init-con0"] == [
        "container-1-request-0",
        "container-2-request-0",
        "container-0-request-0",
    ]
    assert extended_requests(Pod().res(gpu="500m").raw, {GPU}, ONE) == ([], [])
    # Limits stand in for requests the pod does not give (the API server's defaulting).
    limited = Pod().res()
    limited.raw["spec"]["containers"][0]["resources"] = {"limits": {GPU: "2"}}
    assert [(r.name, r.count) for r in extended_requests(limited.raw, {GPU}, ONE)[0]] == [("container-0-request-0", 2)]


def test_the_claim_is_the_pod_s_annotated_and_named_after_it() -> None:
    requests, _ = extended_requests(pod1.raw, {GPU}, ONE)
    raw = claim_object(pod1.raw, requests)
    assert raw["metadata"]["generateName"] == "pod-extended-resources-"
    assert raw["metadata"]["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
    assert raw["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "pod", "uid": "pod-uid", "controller": True}
    ]
    claim = parse_claim(raw)
    assert claim.extended_for == "pod-uid" and claim.namespace == "ns"
    assert [(r.name, r.exactly.class_name, r.exactly.count) for r in claim.requests if r.exactly] == [
        ("container-0-request-0", "class", 1)
    ]
    # Another pod's in-memory claim never shares its key.
    other = {"metadata": {**pod1.raw["metadata"], "uid": "other-uid"}, "spec": pod1.raw["spec"]}
    assert parse_claim(claim_object(other, requests)).key != claim.key


def created_class(name: str, created: str, resource: str | None = None) -> dict[str, Any]:
    raw = make_class().name(name).obj()
    raw["metadata"]["creationTimestamp"] = created
    if resource is not None:
        raw["spec"]["extendedResourceName"] = resource
    return raw


def test_the_newer_class_serves_a_resource_two_name_and_of_equal_age_the_first_by_name() -> None:
    old, new = "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"
    classes = [
        parse_class(created_class("b-new", new, GPU)),
        parse_class(created_class("a-old", old, GPU)),
        parse_class(created_class("z-same", new, GPU1)),
        parse_class(created_class("y-same", new, GPU1)),
        parse_class(created_class("plain", old)),
    ]
    served = classes_by_resource(classes)
    assert served[GPU] == "b-new"
    assert served[GPU1] == "y-same"
    # Every class serves its implicit name, also one that names another resource.
    assert {r: c for r, c in served.items() if r.startswith(IMPLICIT_PREFIX)} == {
        IMPLICIT_PREFIX + c.name: c.name for c in classes
    }
    assert classes_by_resource(reversed(classes)) == served, "the watch's order does not matter"


def test_the_state_follows_classes_and_the_claims_made_for_pods() -> None:
    dra = DraState()
    dra.on_class(False, created_class("old", "2026-11-01T00:00:00Z", GPU))
    dra.on_class(False, created_class("new", "2026-11-02T00:00:00Z", GPU))
    assert dra.class_of_resource[GPU] == "new"
    dra.on_class(True, created_class("new", "2026-11-02T00:00:00Z", GPU))
    assert dra.class_of_resource[GPU] == "old", "the other class serves it again"
    dra.on_class(False, created_class("old", "2026-11-01T00:00:00Z"))
    assert GPU not in dra.class_of_resource, "an update that drops the name stops serving it"

    raw = claim_object(pod1.raw, extended_requests(pod1.raw, {GPU}, ONE)[0])
    raw["metadata"].update(name="pod-extended-resources-abcde", uid="claim-uid", resourceVersion="1")
    dra.on_claim(False, raw)
    found = dra.extended_claim("pod-uid")
    assert found is not None and found.name == "pod-extended-resources-abcde"
    assert dra.extended_claim("other-uid") is None
    dra.on_claim(True, raw)
    assert dra.extended_claim("pod-uid") is None
    # A claim with the annotation but owned by no pod is nobody's extended-resource claim.
    raw["metadata"]["ownerReferences"] = []
    dra.on_claim(False, raw)
    assert dra.extended_claim("pod-uid") is None


@pytest.mark.parametrize(
    ("name", "extended"),
    [
        ("example.com/gpu", True),
        (IMPLICIT_PREFIX + "gpu", True),
        ("cpu", False),
        ("hugepages-2Mi", False),
        ("kubernetes.io/something", False),
        ("requests.example.com/gpu", False),
    ],
)
def test_which_names_a_class_may_serve(name: str, extended: bool) -> None:
    assert is_extended_name(name) is extended
