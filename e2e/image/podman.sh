#!/usr/bin/env bash
# podman with the harness's settings: its own storage under ${USHER_CACHE:-~/.cache/usher}/podman,
# Debian's runc (crun refuses this machine's hybrid cgroup v1 hierarchy), the cgroupfs manager
# (no systemd), and containers that keep this shell's rlimits: podman as root would raise nofile and
# nproc, which fails without CAP_SYS_RESOURCE ("error setting rlimits for ready process"). podman
# lowers its own nproc to 32768 first (so does conmon after it): containers get at most that.
set -euo pipefail
cache="${USHER_CACHE:-$HOME/.cache/usher}"
conf="$cache/podman/containers.conf"
mkdir -p "$cache/podman"
nproc="$(ulimit -Hu)"
[[ "$nproc" != unlimited && "$nproc" -lt 32768 ]] || nproc=32768
want="$(printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n[engine]\nevents_logger = "file"\n' \
  "$(ulimit -Sn)" "$(ulimit -Hn)" "$nproc" "$nproc")"
[[ "$(cat "$conf" 2>/dev/null)" == "$want" ]] || printf '%s\n' "$want" > "$conf"
export CONTAINERS_CONF="$conf"
exec podman --root "$cache/podman/storage" --runroot "$cache/podman/run" --storage-driver overlay \
  --cgroup-manager cgroupfs --runtime runc "$@"
