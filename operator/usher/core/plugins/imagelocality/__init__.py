"""ImageLocality: prefer nodes that already have the pod's container images. Pure.

As kube-scheduler v1.37 scores it: for each image of the pod (init containers,
containers, and image volumes' references) that the node's ``status.images``
names, the image's size scaled by the share of all nodes that have it (so an
image every node has counts in full, one on a single node of a thousand
hardly at all: pods do not pile onto the few nodes that pulled it first). The
sum is clamped between 23 MiB and 1000 MiB per image of the pod and scaled to
0-100. An image reference without a tag or digest is looked up with
``:latest``, as kube-scheduler normalises it. The size of an image is the one
the first node to report the name gave (kube-scheduler's image states).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import MAX_NODE_SCORE, BatchScorePlugin, Handle
from usher.core.framework.names import IMAGE_LOCALITY
from usher.core.hints import ClusterEventWithHint
from usher.core.types import SUCCESS, PodInfo, Status

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = IMAGE_LOCALITY
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
"""Below this, the images a node has count for nothing (a small image is quick to pull anyway)."""
MAX_CONTAINER_THRESHOLD = 1000 * MB
"""Per image of the pod: above this times the pod's image count, more does not score higher."""


def normalized(image: str) -> str:
    """kube's normalizedImageName: ``:latest`` added to a reference with no tag (nor digest) after its last ``/``."""
    return image if image.rfind(":") > image.rfind("/") else image + ":latest"


def pod_images(pod: PodInfo) -> tuple[list[str], int]:
    """The pod's image references, normalised, and how many it has (kube counts every container and image
    volume, even two naming one image)."""
    spec = pod.raw.get("spec") or {}
    images: list[str] = []
    count = 0
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            count += 1
            image = container.get("image") if isinstance(container, Mapping) else None
            if isinstance(image, str):
                images.append(normalized(image))
    for volume in spec.get("volumes") or ():
        source = volume.get("image") if isinstance(volume, Mapping) else None
        if not isinstance(source, Mapping):
            continue
        count += 1
        reference = source.get("reference")
        if isinstance(reference, str):
            images.append(normalized(reference))
    return images, count


def priority(total: int, image_count: int) -> int:
    """kube's calculatePriority: the clamped sum scaled to 0-100."""
    ceiling = MAX_CONTAINER_THRESHOLD * image_count
    total = min(max(total, MIN_THRESHOLD), ceiling)
    if ceiling <= MIN_THRESHOLD:  # no image at all: nothing to prefer (kube would divide by a negative number)
        return 0
    return MAX_NODE_SCORE * (total - MIN_THRESHOLD) // (ceiling - MIN_THRESHOLD)


class ImageLocality:
    """Scores nodes by the size of the pod's images they already have, scaled by how widely each has spread."""

    name = NAME

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        return self.score_nodes(state, pod, [node])[0][0], SUCCESS

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[list[int], Status]:
        images, count = pod_images(pod)
        nodes_total = self._handle.node_count()
        scaled: dict[str, int] = {}
        for image in images:
            known = self._handle.image(image)
            if known is not None and nodes_total:
                size, having = known
                scaled[image] = int(size * (having / nodes_total))  # kube's scaledImageScore
        if not scaled:
            return [priority(0, count)] * len(nodes), SUCCESS
        scores = []
        for node in nodes:
            present = node.images
            scores.append(priority(sum(scaled[i] for i in images if i in scaled and i in present), count))
        return scores, SUCCESS

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return []  # a score plugin rejects no pod


def new(args: Mapping[str, Any], handle: Handle) -> ImageLocality:
    reject_unknown_args(args, set())
    return ImageLocality(handle)


_check: type[BatchScorePlugin] = ImageLocality
