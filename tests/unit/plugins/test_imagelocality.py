"""ImageLocality against kube-scheduler v1.37's TestImageLocalityPriority, and the cache's image states."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from usher.core.cache import Cache
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins.imagelocality import ImageLocality, normalized, pod_images
from usher.core.types import PodInfo

MB = 1024 * 1024


def status(*images: tuple[list[str], int]) -> list[dict[str, Any]]:
    return [{"names": names, "sizeBytes": size * MB} for names, size in images]


NODE_40_300_2000 = status(
    (["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
    (["gcr.io/300:latest", "gcr.io/300:v1"], 300),
    (["gcr.io/2000:latest"], 2000),
)
NODE_250_10 = status((["gcr.io/250:latest"], 250), (["gcr.io/10:latest", "gcr.io/10:v1"], 10))
NODE_600_40_900 = status((["gcr.io/600:latest"], 600), (["gcr.io/40:latest"], 40), (["gcr.io/900:latest"], 900))
NODE_300_600_900 = status((["gcr.io/300:latest"], 300), (["gcr.io/600:latest"], 600), (["gcr.io/900:latest"], 900))
NODE_4000_30 = status((["gcr.io/4000:latest"], 4000), (["gcr.io/30:latest"], 30))
NODE_20_30_40 = status((["gcr.io/20:latest"], 20), (["gcr.io/30:latest"], 30), (["gcr.io/40:latest"], 40))
NO_IMAGES: list[dict[str, Any]] = []


def pod(*images: str, init: tuple[str, ...] = (), volumes: tuple[str, ...] = ()) -> dict[str, Any]:
    raw = make_pod().obj()
    raw["spec"]["containers"] = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    if init:
        raw["spec"]["initContainers"] = [{"name": f"i{i}", "image": image} for i, image in enumerate(init)]
    if volumes:
        raw["spec"]["volumes"] = [{"name": f"v{i}", "image": {"reference": ref}} for i, ref in enumerate(volumes)]
    return raw


def handle_with(*nodes: list[dict[str, Any]]) -> FakeHandle:
    cache = Cache()
    for i, images in enumerate(nodes, start=1):
        raw = make_node().name(f"node{i}").obj()
        raw["status"]["images"] = images
        cache.add_or_update_node(raw)
    return FakeHandle(cache=cache)


@pytest.mark.parametrize(
    ("incoming", "nodes", "expected"),
    [
        pytest.param(
            pod("gcr.io/40", "gcr.io/250"),
            [NODE_40_300_2000, NODE_250_10],
            [0, 5],
            id="two images spread on two nodes, prefer the larger image one",
        ),
        pytest.param(
            pod("gcr.io/40", "gcr.io/300"),
            [NODE_40_300_2000, NODE_250_10],
            [7, 0],
            id="two images on one node, prefer this node",
        ),
        pytest.param(pod("gcr.io/10", "gcr.io/4000"), [NODE_4000_30, NODE_250_10], [100, 0], id="if exceed limit"),
        pytest.param(
            pod("gcr.io/10", "gcr.io/4000"),
            [NODE_4000_30, NODE_250_10, NO_IMAGES],
            [66, 0, 0],
            id="if exceed limit, use limit (with node which has no images present)",
        ),
        pytest.param(
            pod("gcr.io/300", "gcr.io/600", "gcr.io/900"),
            [NODE_600_40_900, NODE_300_600_900, NO_IMAGES],
            [32, 36, 0],
            id="pod with multiple large images, node2 is preferred",
        ),
        pytest.param(pod("gcr.io/30", "gcr.io/40"), [NODE_20_30_40, NODE_4000_30], [1, 0], id="multiple small images"),
        pytest.param(
            pod("gcr.io/30", volumes=("gcr.io/300",)), [NODE_300_600_900, NODE_4000_30], [6, 0], id="image volume"
        ),
        pytest.param(
            pod("gcr.io/30", "gcr.io/300"),
            [NODE_300_600_900, NODE_4000_30],
            [6, 0],
            id="same images as the image volume pod but as container images",
        ),
        pytest.param(
            pod("gcr.io/30", init=("gcr.io/300",)),
            [NODE_40_300_2000, NODE_20_30_40],
            [6, 0],
            id="init containers: two images spread on two nodes, prefer the larger image one",
        ),
    ],
)
def test_image_locality_scores_as_kube_scheduler(
    incoming: dict[str, Any], nodes: list[list[dict[str, Any]]], expected: list[int]
) -> None:
    handle = handle_with(*nodes)
    assert handle.cache is not None
    infos = list(handle.cache.node_infos())
    plugin = ImageLocality(handle)
    pod_info = PodInfo.from_api(incoming)
    assert [plugin.score(CycleState(), pod_info, n)[0] for n in infos] == expected
    assert plugin.score_nodes(CycleState(), pod_info, infos)[0] == expected


def test_an_image_without_a_tag_is_looked_up_as_latest() -> None:
    assert normalized("gcr.io/40") == "gcr.io/40:latest"
    assert normalized("localhost:5000/app") == "localhost:5000/app:latest"
    assert normalized("gcr.io/40:v1") == "gcr.io/40:v1"
    assert normalized("gcr.io/40@sha256:abc") == "gcr.io/40@sha256:abc"
    assert pod_images(PodInfo.from_api(pod("a", "a", init=("b",)))) == (["b:latest", "a:latest", "a:latest"], 3)


def test_the_cache_counts_the_nodes_with_an_image_and_keeps_the_first_size() -> None:
    cache = Cache()

    def node(name: str, *images: tuple[list[str], int]) -> dict[str, Any]:
        raw = make_node().name(name).obj()
        raw["status"]["images"] = status(*images)
        return raw

    cache.add_or_update_node(node("a", (["img:latest"], 100)))
    cache.add_or_update_node(node("b", (["img:latest", "img:v1"], 200)))
    assert cache.image("img:latest") == (100 * MB, 2)
    assert cache.image("img:v1") == (200 * MB, 1)
    cache.add_or_update_node(node("a"))  # the kubelet dropped the image
    assert cache.image("img:latest") == (100 * MB, 1)  # kube's image state keeps its first size
    cache.remove_node("b")
    assert cache.image("img:latest") is None and cache.image("img:v1") is None
    cache.add_or_update_node(node("b", (["img:latest"], 300)))
    assert cache.image("img:latest") == (300 * MB, 1)


def test_malformed_image_entries_count_as_no_image() -> None:
    cache = Cache()
    raw = make_node().name("a").obj()
    raw["status"]["images"] = [{"names": "not-a-list-of-names"}, "junk", {"names": ["ok:latest"], "sizeBytes": "1"}]
    info = cache.add_or_update_node(raw)
    assert dict(info.images) == {"ok:latest": 0}
