"""The DRA e2e images' names (e2e/image/image.env) are the ones the pinned e2e.test asks a node for.

e2e/image/build.sh makes hostpathplugin and busybox stand-ins under the real names, and the node
has no registry to fall back on: a name that drifts from the pinned Kubernetes module's leaves
its pods in ErrImageNeverPull. The expected names are read from the module's own sources (the Go
module cache, where ``e2e/build-binaries.sh`` puts the module) the way e2e.test computes them, so
a new pin in e2e/versions.env that moves a tag fails here, saying which. A missing module is a
failure, not a skip: this check is only worth anything where it runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.perfconfig import module_dir
from e2e.controlplane import cache_dir
from e2e.image import ARCHIVES, archive, busybox_image, hostpathplugin_image

#: test/utils/image's split of an image string into registry, name and tag (csi_manifest.go's imageRE).
IMAGE = re.compile(r"^(.*)/([^/:]*):(.*)$")


@pytest.fixture(scope="module")
def kubernetes() -> Path:
    """The pinned Kubernetes module's directory; a failure naming the command that downloads it."""
    try:
        return module_dir()
    except FileNotFoundError as missing:
        pytest.fail(f"the pinned Kubernetes module is needed to check the DRA images' names: {missing}")


def _strings(value: Any, path: tuple[str, ...]) -> Iterator[str]:
    """The strings at ``path`` below ``value``, through every list on the way (test/utils/image's findStrings)."""
    if not path:
        if isinstance(value, str):
            yield value
    elif isinstance(value, list):
        for child in value:
            yield from _strings(child, path)
    elif isinstance(value, dict) and path[0] in value:
        yield from _strings(value[path[0]], path[1:])


def storage_csi_images(kubernetes: Path) -> set[str]:
    """Every image of the storage-csi manifests, as test/utils/image's appendCSIImageConfigs collects them."""
    images: set[str] = set()
    for manifest in sorted((kubernetes / "test/e2e/testing-manifests/storage-csi").rglob("*.yaml")):
        for item in manifest.read_text().split("\n---"):
            document = yaml.safe_load(item)
            for path in (("spec", "containers", "image"), ("spec", "template", "spec", "containers", "image")):
                images.update(image for image in _strings(document, path) if IMAGE.match(image))
    return images


def test_hostpathplugin_is_the_newest_tag_of_the_storage_csi_manifests(kubernetes: Path) -> None:
    # test/e2e/dra/utils/deploy.go: the repository is a literal, the tag the greatest (as strings)
    # of those the storage-csi manifests use.
    deploy = (kubernetes / "test/e2e/dra/utils/deploy.go").read_text()
    match = re.search(r'hostPathImage := "([^"]+)"', deploy)
    assert match, "deploy.go no longer names hostPathImage: read how it picks the proxy pod's image now"
    repository = match.group(1)
    tags = [image.rpartition(":")[2] for image in storage_csi_images(kubernetes) if image.startswith(repository + ":")]
    assert tags, f"no storage-csi manifest uses {repository}"
    assert hostpathplugin_image() == f"{repository}:{max(tags)}"


def test_busybox_is_test_utils_images_busybox(kubernetes: Path) -> None:
    manifest = (kubernetes / "test/utils/image/manifest.go").read_text()
    match = re.search(r'configs\[BusyBox\] = Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}', manifest)
    assert match, "test/utils/image/manifest.go no longer configures BusyBox as Config{list.<Registry>, name, tag}"
    registry_field, name, tag = match.groups()
    registry = re.search(rf'^\s*{registry_field}:\s*"([^"]+)"', manifest, re.MULTILINE)
    assert registry, f"manifest.go's initRegistry has no {registry_field}"
    assert busybox_image() == f"{registry.group(1)}/{name}:{tag}"


@pytest.mark.parametrize("name", ["hostpathplugin", "busybox"])
def test_build_sh_saves_the_archive_that_archive_names(name: str) -> None:
    assert name in ARCHIVES
    assert archive(name) == cache_dir() / "images" / f"{name}.oci.tar"
    build = (Path(__file__).resolve().parents[2] / "e2e/image/build.sh").read_text()
    assert f'"$images/{name}.oci.tar"' in build


def test_archive_refuses_a_name_build_sh_does_not_save() -> None:
    with pytest.raises(ValueError, match="no archive 'hostpath'"):
        archive("hostpath")
