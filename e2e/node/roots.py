"""Where the real node's kubelet keeps its state, and taking mounts down (e2e.node's helpers).

kubelet's root directory is ``/run/usher-kl-<4 hex>``, not under the node's work directory: DRA drivers'
sockets live beneath it (``plugins/<driver>/dra-<pod uid>.sock``), an AF_UNIX path has at most 107 bytes,
and the DRA e2e specs' longest driver name leaves 18 characters for the root. A lock on the directory tells
a live node's root from one a killed run left behind, which the next claim unmounts and removes.
"""

from __future__ import annotations

import fcntl
import glob
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KubeletRoot", "mounts_under", "unmount_under"]

#: Kubelets' root directories are this and four hex digits: 18 characters (see the module docstring).
_KUBELET_ROOT_PREFIX = "/run/usher-kl-"
#: Held while roots are claimed or swept, so that no two of those interleave.
_KUBELET_ROOTS_LOCK = Path("/run/usher-kl.lock")


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or under ``directory``, deepest first."""
    top = str(directory)
    mounts = {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()}
    return sorted((m for m in mounts if m == top or m.startswith(top + "/")), key=len, reverse=True)


def unmount_under(directory: Path) -> None:
    """Unmount everything at or under ``directory``, deepest first; lazily, so a busy mount goes too."""
    for mount in mounts_under(directory):
        subprocess.run(["umount", "--lazy", mount], capture_output=True, check=False, timeout=60)


@dataclass(frozen=True)
class KubeletRoot:
    """A kubelet root directory and the descriptor whose lock says a live node uses it.

    The lock is an flock on the directory itself: the kernel drops it when the process holding it dies,
    and kubelet dies with that process (`spawn`'s parent-death signal), so a root whose lock is free is
    a leftover. Claiming removes leftovers; both happen under `_KUBELET_ROOTS_LOCK`.
    """

    path: Path
    lock: int

    @classmethod
    def claim(cls) -> KubeletRoot:
        """A new, empty root of a name no other root has, locked until `release`."""
        with _KUBELET_ROOTS_LOCK.open("a") as roots:
            fcntl.flock(roots, fcntl.LOCK_EX)
            for root in map(Path, glob.glob(f"{_KUBELET_ROOT_PREFIX}*")):
                if root.is_dir() and not root.is_symlink():
                    _remove_if_unlocked(root)
            path = Path(f"{_KUBELET_ROOT_PREFIX}{secrets.token_hex(2)}")
            while path.exists():
                path = Path(f"{_KUBELET_ROOT_PREFIX}{secrets.token_hex(2)}")
            path.mkdir(mode=0o755)
            lock = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(lock, fcntl.LOCK_EX)
            return cls(path, lock)

    def release(self) -> None:
        """Unmount what kubelet left under the root, remove it, and drop the lock."""
        _remove_root(self.path)
        os.close(self.lock)


def _remove_if_unlocked(root: Path) -> None:
    lock = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # a live node's
    finally:
        os.close(lock)
    _remove_root(root)


def _remove_root(root: Path) -> None:
    """kubelet bind-mounts its root onto itself and mounts volumes beneath it: unmount, then remove. If a
    mount stays, removing would reach into what is mounted there; the directory stays instead."""
    unmount_under(root)
    if not mounts_under(root):
        shutil.rmtree(root, ignore_errors=True)
