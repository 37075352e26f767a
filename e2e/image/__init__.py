"""usher's container image as this machine builds it (e2e/image/build.sh, `make image`), and podman.

The image is built without a registry from Debian bookworm root filesystems that debootstrap makes
(the Dockerfile's PYTHON_IMAGE and RUNTIME_IMAGE). podman keeps its storage under the usher cache and
runs with Debian's runc, the cgroupfs manager and this shell's rlimits (e2e/image/podman.sh says why);
every podman call of the harness goes through that script.

build.sh also makes the images a real node (e2e/node) runs besides usher's, each saved as an OCI
archive (`archive`) for ``ctr images import``: the pod sandbox's pause (`pause_image`), and under the
names the pinned e2e.test asks for, the two that Kubernetes' DRA e2e specs run (build.sh's target dra):
hostpathplugin's proxy mode (`hostpathplugin_image`, from e2e/dra-proxy) and the test pods' shell
(`busybox_image`), both on the runtime root filesystem.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from e2e.controlplane import cache_dir, read_versions

__all__ = [
    "ARCHIVES",
    "BUILD_COMMAND",
    "CHART",
    "PODMAN",
    "ImageMissingError",
    "archive",
    "busybox_image",
    "chart_app_version",
    "hostpathplugin_image",
    "image_settings",
    "pause_image",
    "podman",
    "require_image",
    "usher_image",
]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CHART = REPO / "charts" / "usher"
PODMAN = HERE / "podman.sh"
BUILD_COMMAND = "make image"
#: The images build.sh saves as OCI archives (`archive`), by its target's name.
ARCHIVES = ("usher", "pause", "hostpathplugin", "busybox")


class ImageMissingError(RuntimeError):
    """The image a test needs was not built (the message says how to build it)."""


def image_settings() -> dict[str, str]:
    """The ``KEY=value`` settings of e2e/image/image.env (image names, Debian suite and mirror)."""
    return read_versions(HERE / "image.env")


def chart_app_version() -> str:
    """The chart's appVersion: the tag its Deployment runs when ``image.tag`` is empty."""
    match = re.search(r'^appVersion:\s*"?([^"\s]+)"?\s*$', (CHART / "Chart.yaml").read_text(), re.MULTILINE)
    assert match, "charts/usher/Chart.yaml has no appVersion"
    return match.group(1)


def usher_image() -> str:
    """The full name of the image built for the chart's appVersion, e.g. ``docker.io/library/usher:0.1.0``:
    what the chart's ``usher:<appVersion>`` means to a container runtime."""
    return f"{image_settings()['USHER_IMAGE']}:{chart_app_version()}"


def pause_image() -> str:
    """The pod sandbox image of the real node (e2e/node/pause)."""
    return image_settings()["PAUSE_IMAGE"]


def hostpathplugin_image() -> str:
    """What the DRA e2e specs' proxy pod runs: e2e/dra-proxy under hostpathplugin's name and tag."""
    return image_settings()["HOSTPATHPLUGIN_IMAGE"]


def busybox_image() -> str:
    """What the DRA e2e specs' test pods run (test/utils/image's BusyBox): a shell and coreutils."""
    return image_settings()["E2E_BUSYBOX_IMAGE"]


def archive(name: str) -> Path:
    """An OCI archive that build.sh saved for ``ctr images import``: one of `ARCHIVES`."""
    if name not in ARCHIVES:
        raise ValueError(f"build.sh saves no archive {name!r}: one of {', '.join(ARCHIVES)}")
    images = cache_dir() / "images"
    return images / (f"usher-{chart_app_version()}.oci.tar" if name == "usher" else f"{name}.oci.tar")


def podman(*args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run podman with the harness's settings; with ``check``, fail with its output when it fails."""
    result = subprocess.run(
        [str(PODMAN), *args], capture_output=True, text=True, check=False, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def require_image(reference: str | None = None) -> str:
    """The image's name once podman has it; else `ImageMissingError` naming the build command."""
    reference = reference or usher_image()
    try:
        found = podman("image", "exists", reference, check=False).returncode == 0
    except FileNotFoundError:
        found = False
    if not found:
        raise ImageMissingError(
            f"podman has no image {reference}: build it with `{BUILD_COMMAND}` (Debian's podman, buildah, runc and "
            "debootstrap come from `make tools`)"
        )
    return reference
