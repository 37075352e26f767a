"""The volume state: PVCs and PVs as watched or assumed (kube-scheduler's assume cache), and the rest."""

from __future__ import annotations

import pytest

from tests.builders import make_pv, make_pvc, make_storage_class
from usher.core.volumes.model import ANN_SELECTED_NODE
from usher.core.volumes.state import VolumeState


def test_an_assumed_claim_shows_until_the_watch_brings_a_version_as_new() -> None:
    state = VolumeState()
    state.on_event("persistentvolumeclaims", False, make_pvc().name("c").version("5").obj())
    assumed = make_pvc().name("c").version("5").annotate(ANN_SELECTED_NODE, "n1").obj()
    state.assume_claim(assumed)
    assert state.claim("default/c").selected_node == "n1"  # type: ignore[union-attr]
    assert state.watched_claim("default/c").selected_node is None  # type: ignore[union-attr]
    state.on_event("persistentvolumeclaims", False, make_pvc().name("c").version("4").obj())
    assert state.claim("default/c").selected_node == "n1", "an older event does not undo the assumption"  # type: ignore[union-attr]
    state.on_event("persistentvolumeclaims", False, make_pvc().name("c").version("6").obj())
    assert state.claim("default/c").selected_node is None, "the watch's newer copy wins"  # type: ignore[union-attr]


def test_restore_drops_the_assumed_copy_and_every_change_bumps_the_version() -> None:
    state = VolumeState()
    seen: list[int] = []
    state.on_change(lambda: seen.append(state.version))
    state.on_event("persistentvolumes", False, make_pv().name("v").obj())
    state.assume_volume(make_pv().name("v").claimed_by("default", "c").obj())
    assert state.volume("v").claim_ref is not None  # type: ignore[union-attr]
    state.restore_volume("v")
    assert state.volume("v").claim_ref is None  # type: ignore[union-attr]
    assert seen == [1, 2, 3]


def test_a_malformed_object_is_recorded_as_broken_and_absent() -> None:
    state = VolumeState()
    bad = make_pvc().name("c").request("lots").obj()
    old, new = state.on_event("persistentvolumeclaims", False, bad)
    assert (old, new) == (None, None)
    assert state.claim("default/c") is None
    assert "spec.resources.requests.storage" in state.broken["persistentvolumeclaims/default/c"]
    state.on_event("persistentvolumeclaims", False, make_pvc().name("c").obj())
    assert "persistentvolumeclaims/default/c" not in state.broken


def test_watched_changes_are_listed_since_a_version_until_the_log_drops_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from usher.core.volumes import state as state_module

    monkeypatch.setattr(state_module, "WATCHED_LOG", 3)
    volumes = state_module.VolumeState()
    start = volumes.version
    volumes.on_event("persistentvolumeclaims", False, make_pvc().name("a").obj())
    after_a = volumes.version
    volumes.assume_claim({**make_pvc().name("a").obj(), "metadata": {"name": "a", "namespace": "default",
                                                                    "resourceVersion": "9"}})  # fmt: skip
    volumes.on_event("persistentvolumes", False, make_pv().name("v").obj())
    assert volumes.watched_changes_since(start) == [("persistentvolumes", "v"), ("persistentvolumeclaims", "default/a")]
    assert volumes.watched_changes_since(after_a) == [("persistentvolumes", "v")], "assumed copies are not watched"
    assert volumes.watched_changes_since(volumes.version) == []
    for name in ("b", "c"):
        volumes.on_event("storageclasses", False, make_storage_class(name))
    assert volumes.watched_changes_since(start) is None, "the first event fell out of the log"
    assert volumes.watched_changes_since(after_a) == [
        ("storageclasses", "c"),
        ("storageclasses", "b"),
        ("persistentvolumes", "v"),
    ]
