#!/usr/bin/env bash
# Build usher's container image here, with no registry: the Dockerfile's PYTHON_IMAGE and
# RUNTIME_IMAGE are Debian bookworm root filesystems made by debootstrap (from Debian's
# packages) and imported into podman. Also a pause image for the real node (e2e/node), from
# the Go program in e2e/node/pause, and the two images Kubernetes' DRA e2e specs run on a real
# node (hostpathplugin, busybox: target dra), from the runtime stage's root filesystem. Everything
# lives under ${USHER_CACHE:-~/.cache/usher}:
#
#   podman storage        $cache/podman/              (use e2e/image/podman.sh to look at it)
#   base root filesystems $cache/images/rootfs-*.tar  (cached by the debootstrap arguments)
#   image archives        $cache/images/*.oci.tar     (for `ctr images import`; re-saved when the image changes)
#
#   bash e2e/image/build.sh [usher] [pause] [hostpathplugin] [busybox] [dra]
#
# Prints nothing on stdout but the image names it built, one a line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${USHER_CACHE:-$HOME/.cache/usher}"
images="$cache/images"
mkdir -p "$images"
# shellcheck source=image.env
source "$here/image.env"
podman=("$here/podman.sh")

log() { printf '[build-image] %s\n' "$*" >&2; }

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { log "$tool is missing: run \`make tools\` (Debian's podman buildah runc debootstrap)"; exit 2; }
  done
}

# rootfs NAME PACKAGES: a bookworm minbase root filesystem with PACKAGES, imported into podman as
# localhost/usher-NAME:<hash of what made it>; echoes that name. Docs, man pages, locales and apt's
# lists are left out (the copyright files stay): they are a third of a minbase system.
rootfs() {
  local name="$1" packages="$2" key ref tar
  key="$(printf '%s\n' "$DEBIAN_SUITE" "$DEBIAN_MIRROR" "$packages" "$(sed -n '/^rootfs()/,/^}/p' "$0")" | sha256sum | cut -c1-12)"
  ref="localhost/usher-$name:$DEBIAN_SUITE-$key"
  tar="$images/rootfs-$name-$DEBIAN_SUITE-$key.tar"
  if "${podman[@]}" image exists "$ref"; then log "$ref: cached"; echo "$ref"; return; fi
  if [[ ! -s "$tar" ]]; then
    local dir="$images/rootfs-$name.tmp" t0=$SECONDS
    log "$ref: debootstrap $DEBIAN_SUITE ($packages), about a minute"
    rm -rf "$dir"
    debootstrap --variant=minbase --include="$packages" "$DEBIAN_SUITE" "$dir" "$DEBIAN_MIRROR" >"$images/rootfs-$name.log" 2>&1 \
      || { tail -20 "$images/rootfs-$name.log" >&2; exit 1; }
    rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/* "$dir"/var/log/* "$dir"/usr/share/man \
      "$dir"/usr/share/info "$dir"/usr/share/locale "$dir"/usr/share/lintian "$dir"/usr/share/linda
    find "$dir/usr/share/doc" -type f ! -name copyright -delete
    find "$dir" -name __pycache__ -prune -exec rm -rf {} +
    tar --numeric-owner --xattrs -C "$dir" -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
    rm -rf "$dir"
    log "$ref: root filesystem in $((SECONDS - t0)) s, $(du -h "$tar" | cut -f1)"
  fi
  "${podman[@]}" import --quiet "$tar" "$ref" >/dev/null
  echo "$ref"
}

# save REF ARCHIVE: an OCI archive of REF for `ctr images import`, rewritten only when the image changed.
save() {
  local ref="$1" archive="$2" id
  id="$("${podman[@]}" image inspect --format '{{.Id}}' "$ref")"
  if [[ -s "$archive" && "$(cat "$archive.id" 2>/dev/null)" == "$id" ]]; then return; fi
  rm -f "$archive"
  "${podman[@]}" save --quiet --format oci-archive -o "$archive.tmp" "$ref"
  mv "$archive.tmp" "$archive"
  printf '%s' "$id" > "$archive.id"
}

# built REF SUM: whether podman has REF built from SUM (its usher.source label), a hash of all
# that went into it.
built() {
  "${podman[@]}" image exists "$1" \
    && [[ "$("${podman[@]}" image inspect --format '{{index .Labels "usher.source"}}' "$1")" == "$2" ]]
}

# The Dockerfile's RUNTIME_IMAGE: python3 on minbase, which has dash and coreutils, so the DRA
# images are made from it too (no debootstrap of their own).
runtime_rootfs() { rootfs base "python3-minimal,libpython3.11-stdlib"; }

build_usher() {
  need podman debootstrap runc
  local build_base runtime_base tag ref t0=$SECONDS
  build_base="$(rootfs build-base "python3,python3-venv,ca-certificates")"
  runtime_base="$(runtime_rootfs)"
  tag="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/usher/Chart.yaml")"
  ref="$USHER_IMAGE:$tag"
  # Package downloads may go through a TLS-intercepting proxy that only the host's CA bundle
  # trusts: the build sees the host's bundle and a pip configuration naming it (read-only mounts,
  # not layers of the image). pip's own index settings, when set, come along.
  local pipconf="$images/pip.conf" ca=/etc/ssl/certs/ca-certificates.crt
  {
    echo "[global]"
    echo "cert = $ca"
    if [[ -n "${PIP_INDEX_URL:-}" ]]; then echo "index-url = $PIP_INDEX_URL"; fi
    if [[ -n "${PIP_EXTRA_INDEX_URL:-}" ]]; then echo "extra-index-url = $PIP_EXTRA_INDEX_URL"; fi
  } > "$pipconf"
  local mounts=(-v "$pipconf:/etc/pip.conf:ro")
  if [[ -s "$ca" ]]; then mounts+=(-v "$ca:$ca:ro"); fi
  log "$ref: podman build from $build_base and $runtime_base"
  "${podman[@]}" build --quiet --network host "${mounts[@]}" \
    --build-arg "PYTHON_IMAGE=$build_base" --build-arg "RUNTIME_IMAGE=$runtime_base" \
    -t "$ref" -f "$repo/Dockerfile" "$repo" >/dev/null
  # The image this tag named before and the build stage's images are dangling now: 100s of MB a build.
  # Best effort: a container still using one (a test run killed midway) keeps it, and that is no error.
  "${podman[@]}" image prune --force >/dev/null 2>&1 || log "podman image prune left images in use (podman ps -a)"
  save "$ref" "$images/usher-$tag.oci.tar"
  log "$ref: built in $((SECONDS - t0)) s, $("${podman[@]}" image inspect --format '{{.Size}}' "$ref" | numfmt --to=iec) ($images/usher-$tag.oci.tar)"
  echo "$ref"
}

# small_image ARCHIVE REF SUM CONTAINERFILE [GO_SOURCE]: REF made from CONTAINERFILE, with the static Go program
# in GO_SOURCE built into the context under ARCHIVE's name (pause for pause.oci.tar), unless podman has it built
# from SUM; saved as ARCHIVE.
small_image() {
  local archive="$1" ref="$2" sum="$3" containerfile="$4" src="${5:-}" name dir t0=$SECONDS
  name="$(basename "$archive" .oci.tar)"
  dir="$images/$name-build"
  if built "$ref" "$sum"; then
    log "$ref: cached"
  else
    rm -rf "$dir"; mkdir -p "$dir"
    if [[ -n "$src" ]]; then
      (cd "$src" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$dir/$name" .)
    fi
    printf '%s\n' "$containerfile" > "$dir/Containerfile"
    "${podman[@]}" build --quiet --label "usher.source=$sum" -t "$ref" -f "$dir/Containerfile" "$dir" >/dev/null
    log "$ref: built in $((SECONDS - t0)) s"
  fi
  save "$ref" "$archive"
  echo "$ref"
}

# The pod sandbox's image: e2e/node/pause (a static Go program that waits for a signal), alone in
# an image FROM scratch.
build_pause() {
  need podman
  local src="$repo/e2e/node/pause" sum
  sum="$(cat "$src"/*.go "$src/go.mod" | sha256sum | cut -c1-12)"
  small_image "$images/pause.oci.tar" "$PAUSE_IMAGE" "$sum" \
    "$(printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]')" "$src"
}

# What the DRA e2e specs' proxy pod runs (test/e2e/testing-manifests/dra/dra-test-driver-proxy.yaml):
# `sh -c 'while true; do sleep 10000; done'`, then by exec /hostpathplugin in proxy mode and sh,
# base64, mv, rm, mkdir, cat and ls. Upstream's image is the CSI hostpath driver on Alpine; here
# e2e/dra-proxy (proxy mode alone, stdlib Go) on the runtime root filesystem.
build_hostpathplugin() {
  need podman debootstrap runc
  local src="$repo/e2e/dra-proxy" base containerfile sum
  base="$(runtime_rootfs)"
  containerfile="$(printf 'FROM %s\nCOPY hostpathplugin /hostpathplugin\nENTRYPOINT ["/hostpathplugin"]' "$base")"
  sum="$(cat "$src"/*.go "$src/go.mod" <(echo "$containerfile") | sha256sum | cut -c1-12)"
  small_image "$images/hostpathplugin.oci.tar" "$HOSTPATHPLUGIN_IMAGE" "$sum" "$containerfile" "$src"
}

# The image of the DRA e2e specs' test pods (test/utils/image's BusyBox): they run
# `sh -c "trap exit TERM; while true; do sleep 1; done"` as a non-root user, and e2e.test execs
# `env` in them. Any root filesystem with a shell and coreutils serves: the runtime one.
build_busybox() {
  need podman debootstrap runc
  local base containerfile sum
  base="$(runtime_rootfs)"
  containerfile="$(printf 'FROM %s\nCMD ["/bin/sh"]' "$base")"
  sum="$(echo "$containerfile" | sha256sum | cut -c1-12)"
  small_image "$images/busybox.oci.tar" "$E2E_BUSYBOX_IMAGE" "$sum" "$containerfile"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(usher)
for t in "${targets[@]}"; do
  case "$t" in
    usher) build_usher ;;
    pause) build_pause ;;
    hostpathplugin) build_hostpathplugin ;;
    busybox) build_busybox ;;
    dra) build_hostpathplugin; build_busybox ;;
    *) log "unknown target $t (usher, pause, hostpathplugin, busybox, dra)"; exit 2 ;;
  esac
done
