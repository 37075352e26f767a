#!/usr/bin/env bash
# Build the real control-plane binaries from Go modules (no Docker, no
# downloads besides the Go module proxy) into a version-stamped cache outside
# the repo:  ${USHER_CACHE:-~/.cache/usher}/bin/<version>/<binary>.
#
# A binary whose `--version` already reports the pinned version is skipped,
# so a warm run costs seconds. Prints the bin directories it filled.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

cache="${USHER_CACHE:-$HOME/.cache/usher}"
work="$cache/build"
mkdir -p "$work"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
goflags=(-trimpath)

log() { printf '[build-binaries] %s\n' "$*" >&2; }

# has_version BIN PATTERN ARGS...: true when BIN exists and `BIN ARGS` prints PATTERN.
has_version() {
  local bin="$1" want="$2"; shift 2
  [[ -x "$bin" ]] && "$bin" "$@" 2>/dev/null | grep -qF -- "$want"
}

# wrapper_module DIR: a throwaway main module, so dependencies' local
# `replace` directives (which break `go install pkg@version`) do not apply.
wrapper_module() {
  local dir="$1"
  mkdir -p "$dir"
  if [[ ! -f "$dir/go.mod" ]]; then
    (cd "$dir" && go mod init "usher.invalid/$(basename "$dir")" >/dev/null 2>&1)
  fi
}

build_kubernetes() {
  local v="$KUBERNETES_VERSION" out="$cache/bin/$KUBERNETES_VERSION"
  local staging="v0.${v#v1.}"
  local need=0 b
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    has_version "$out/$b" "Kubernetes $v" --version || need=1
  done
  has_version "$out/kubectl" "Client Version: $v" version --client || need=1
  if [[ $need == 0 ]]; then log "kubernetes $v: cached"; return; fi
  log "kubernetes $v: building (cold: 15-30 min on 2 cores)"
  local dir="$work/kubernetes-$v"
  rm -rf "$dir"; wrapper_module "$dir"
  cd "$dir"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 with replaces that
  # only work inside its own repo: point every one of them at the release tag.
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  local mods
  mods="$(sed -n 's/^[[:space:]]*\(k8s\.io\/[a-z0-9-]*\) v0\.0\.0$/\1/p' "$gomod" | sort -u)"
  [[ -n "$mods" ]] || { log "no staging modules found in $gomod"; exit 1; }
  local m args=()
  for m in $mods; do args+=("-replace=$m=$m@$staging"); done
  go mod edit "${args[@]}"
  local pkgs=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
              k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
  local p
  for p in "${pkgs[@]}"; do go get -tool "$p@$v" >/dev/null; done
  local minor="${v#v1.}"; minor="${minor%%.*}"
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$out"
  go build "${goflags[@]}" -tags selinux,notest,grpcnotrace -ldflags "$ld" -o "$out/" "${pkgs[@]}"
  cd - >/dev/null
}

# staging_replaces: `go mod edit` -replace args pointing every staging module
# k8s.io/kubernetes@$KUBERNETES_VERSION requires at v0.0.0 at its release tag
# (its own replaces only work inside its repo). Run in a wrapper module.
staging_replaces() {
  local v="$KUBERNETES_VERSION" staging="v0.${KUBERNETES_VERSION#v1.}"
  local gomod mods m
  gomod="$(go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  mods="$(sed -n 's/^[[:space:]]*\(k8s\.io\/[a-z0-9-]*\) v0\.0\.0$/\1/p' "$gomod" | sort -u)"
  [[ -n "$mods" ]] || { log "no staging modules found in $gomod"; exit 1; }
  for m in $mods; do printf -- '-replace=%s=%s@%s\n' "$m" "$m" "$staging"; done
}

# kube_ldflags: version stamps as Kubernetes' own build sets them.
kube_ldflags() {
  local v="$KUBERNETES_VERSION" minor="${KUBERNETES_VERSION#v1.}" p ld="-s -w"
  minor="${minor%%.*}"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  printf '%s' "$ld"
}

# The sig-scheduling and DRA specs of Kubernetes' e2e suite as one test binary
# (e2e/conformance/suite/main_test.go), for e2e/conformance/run.py.
# Not in the default targets: only the conformance run needs it.
build_e2e_test() {
  local v="$KUBERNETES_VERSION" out="$cache/bin/$KUBERNETES_VERSION"
  local bin="$out/e2e.test" src="$here/conformance/suite/main_test.go"
  local stamp="$out/e2e.test.sha256" sum
  sum="$(cat "$src" "$here/versions.env" | sha256sum | cut -c1-16)"
  # The binary's version alone would not notice an edited main_test.go.
  if has_version "$bin" "$v" --version && [[ "$(cat "$stamp" 2>/dev/null)" == "$sum" ]]; then
    log "e2e.test $v: cached"; return
  fi
  log "e2e.test $v: building (about 4 min warm, more cold, on 2 cores)"
  local dir="$work/e2e-test-$v"
  rm -rf "$dir"; wrapper_module "$dir"
  cp "$src" "$dir/main_test.go"
  cd "$dir"
  local args=()
  mapfile -t args < <(staging_replaces)
  go mod edit "${args[@]}"
  go get "k8s.io/kubernetes@$v" >/dev/null
  go mod tidy >/dev/null
  mkdir -p "$out"
  # -vet=off: vet checks our 100-line main, not worth its time here.
  go test -c -vet=off "${goflags[@]}" -tags selinux,notest,grpcnotrace -ldflags "$(kube_ldflags)" -o "$bin.tmp" .
  mv "$bin.tmp" "$bin"
  printf '%s' "$sum" > "$stamp"
  cd - >/dev/null
}

build_etcd() {
  local v="$ETCD_VERSION" out="$cache/bin/$ETCD_VERSION"
  if has_version "$out/etcd" "etcd Version: ${v#v}" --version; then log "etcd $v: cached"; return; fi
  log "etcd $v: building"
  local dir="$work/etcd-$v"
  rm -rf "$dir"; wrapper_module "$dir"
  cd "$dir"
  go get -tool "go.etcd.io/etcd/server/v3@$v" >/dev/null
  mkdir -p "$out"
  go build "${goflags[@]}" -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
  cd - >/dev/null
}

# kwok v0.8.0 deletes a pod by name only: when a pod is deleted and another is created at once
# under the same name (Kubernetes' e2e framework does this), kwok's late delete of the old pod
# can remove the new one. The harness builds kwok with a UID precondition on that delete.
KWOK_PATCH_MARK="+usher.uid-delete"

patch_kwok() {
  local src="$1" file="$1/pkg/kwok/controllers/pod_controller.go"
  python3 - "$file" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
old = "\terr := c.typedClient.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, deleteOpt)\n\tif err != nil {\n\t\treturn err\n\t}\n"
new = (
    "\topts := deleteOpt\n"
    "\topts.Preconditions = metav1.NewUIDPreconditions(string(pod.UID))\n"
    "\terr := c.typedClient.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts)\n"
    "\tif apierrors.IsConflict(err) {\n"
    "\t\treturn nil // the name belongs to a newer pod now: this one is gone already\n"
    "\t}\n"
    "\tif err != nil {\n\t\treturn err\n\t}\n"
)
if text.count(old) != 1:
    sys.exit(f"patch_kwok: the delete call in {path} changed; review the patch")
text = text.replace(old, new).replace(
    '\tcorev1 "k8s.io/api/core/v1"\n', '\tcorev1 "k8s.io/api/core/v1"\n\tapierrors "k8s.io/apimachinery/pkg/api/errors"\n', 1
)
open(path, "w").write(text)
PY
}

build_kwok() {
  local v="$KWOK_VERSION" out="$cache/bin/$KWOK_VERSION"
  if has_version "$out/kwok" "$v$KWOK_PATCH_MARK" --version; then log "kwok $v: cached"; return; fi
  log "kwok $v: building (with the harness's UID-precondition patch)"
  local dir="$work/kwok-$v"
  rm -rf "$dir"; wrapper_module "$dir"
  cd "$dir"
  go get -tool "sigs.k8s.io/kwok/cmd/kwok@$v" >/dev/null
  local src
  src="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  cp -r "$src" "$dir/kwok-src"; chmod -R u+w "$dir/kwok-src"
  patch_kwok "$dir/kwok-src"
  go mod edit -replace "sigs.k8s.io/kwok=./kwok-src"
  mkdir -p "$out"
  go build "${goflags[@]}" -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$v$KWOK_PATCH_MARK" -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok
  # kwok ships its stage definitions in the module, not in the binary.
  rm -rf "$out/kwok-stages"; mkdir -p "$out/kwok-stages"
  cp -r "$src/kustomize/stage/." "$out/kwok-stages/"
  chmod -R u+w "$out/kwok-stages"
  cd - >/dev/null
}

build_helm() {
  local v="$HELM_VERSION" out="$cache/bin/$HELM_VERSION"
  if has_version "$out/helm" "$v" version --short; then log "helm $v: cached"; return; fi
  log "helm $v: building"
  local dir="$work/helm-$v"
  rm -rf "$dir"; wrapper_module "$dir"
  cd "$dir"
  go get -tool "helm.sh/helm/v4/cmd/helm@$v" >/dev/null
  mkdir -p "$out"
  go build "${goflags[@]}" -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$v" -o "$out/helm" helm.sh/helm/v4/cmd/helm
  cd - >/dev/null
}

# The CSI storage that e2e/storage.py runs per kwok node: Kubernetes' external-provisioner
# sidecar, built inside its own module so its go.mod and go.sum pin every dependency as its
# release does, and the harness's driver from e2e/hostpath-csi, whose --version is the hash of
# its sources (e2e/storage.py computes the same hash and refuses a stale binary).
build_csi() {
  local v="$EXTERNAL_PROVISIONER_VERSION" out="$cache/bin/external-provisioner-$EXTERNAL_PROVISIONER_VERSION"
  if has_version "$out/csi-provisioner" "csi-provisioner $v" --version; then
    log "csi-provisioner $v: cached"
  else
    log "csi-provisioner $v: building (about 3 min cold on 2 cores)"
    local mod="github.com/kubernetes-csi/external-provisioner/${v%%.*}" dir
    dir="$(cd "$work" && go mod download -json "$mod@$v" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
    [[ -d "$dir" ]] || { log "go mod download $mod@$v gave no directory"; exit 1; }
    mkdir -p "$out"
    (cd "$dir" && go build "${goflags[@]}" -ldflags "-s -w -X main.version=$v" -o "$out/csi-provisioner.tmp" ./cmd/csi-provisioner)
    mv "$out/csi-provisioner.tmp" "$out/csi-provisioner"
  fi
  local src="$here/hostpath-csi" bin="$cache/bin/hostpath-csi/hostpath-csi" sum
  sum="$(find "$src" -maxdepth 1 -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)"
  if has_version "$bin" "hostpath-csi $sum" --version; then log "hostpath-csi $sum: cached"; return; fi
  log "hostpath-csi $sum: building"
  mkdir -p "$(dirname "$bin")"
  (cd "$src" && go build "${goflags[@]}" -ldflags "-s -w -X main.version=$sum" -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
}

# The e2e tests' Prometheus (e2e/prometheus.py): built inside its own module, as its release is, with
# only the Kubernetes service discovery (Debian's package has none; the real-node test discovers the
# chart's pods through its Service's EndpointSlices). No web UI assets: the tests use the HTTP API.
build_prometheus() {
  local v="$PROMETHEUS_VERSION" out="$cache/bin/prometheus-$PROMETHEUS_VERSION"
  if has_version "$out/prometheus" "version $v" --version; then log "prometheus $v: cached"; return; fi
  log "prometheus $v: building (about 4 min cold on 2 cores)"
  local mod="github.com/prometheus/prometheus" dir
  dir="$(cd "$work" && go mod download -json "$mod@$v" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  [[ -d "$dir" ]] || { log "go mod download $mod@$v gave no directory"; exit 1; }
  mkdir -p "$out"
  (cd "$dir" && GOWORK=off go build "${goflags[@]}" -tags remove_all_sd,enable_kubernetes_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v" -o "$out/prometheus.tmp" ./cmd/prometheus)
  mv "$out/prometheus.tmp" "$out/prometheus"
}

# The real node (e2e/node, `make real-node-e2e`): kubelet from the pinned Kubernetes release, containerd 2.x
# with its runc shim, and the CNI plugins the node's bridge network needs. All CGO off; runc itself is
# Debian's (`make tools`). Not in the default targets: only the real-node run needs them.
build_kubelet() {
  local v="$KUBERNETES_VERSION" out="$cache/bin/$KUBERNETES_VERSION"
  if has_version "$out/kubelet" "Kubernetes $v" --version; then log "kubelet $v: cached"; return; fi
  log "kubelet $v: building (about 4 min on 2 cores once the modules are downloaded)"
  local dir="$work/kubelet-$v"
  rm -rf "$dir"; wrapper_module "$dir"
  cd "$dir"
  local args=()
  mapfile -t args < <(staging_replaces)
  go mod edit "${args[@]}"
  go get -tool "k8s.io/kubernetes/cmd/kubelet@$v" >/dev/null
  mkdir -p "$out"
  go build "${goflags[@]}" -tags selinux,notest,grpcnotrace -ldflags "$(kube_ldflags)" -o "$out/kubelet.tmp" k8s.io/kubernetes/cmd/kubelet
  mv "$out/kubelet.tmp" "$out/kubelet"
  cd - >/dev/null
}

build_containerd() {
  local v="$CONTAINERD_VERSION" out="$cache/bin/containerd-$CONTAINERD_VERSION" b need=0
  for b in containerd ctr; do has_version "$out/$b" "$v" --version || need=1; done
  has_version "$out/containerd-shim-runc-v2" "$v" -v || need=1
  if [[ $need == 0 ]]; then log "containerd $v: cached"; return; fi
  log "containerd $v: building (about 4 min cold on 2 cores)"
  local dir="$work/containerd-$v" mod="github.com/containerd/containerd/v2"
  rm -rf "$dir"; wrapper_module "$dir"
  cd "$dir"
  local pkgs=("$mod/cmd/containerd" "$mod/cmd/ctr" "$mod/cmd/containerd-shim-runc-v2") p
  for p in "${pkgs[@]}"; do go get -tool "$p@$v" >/dev/null; done
  mkdir -p "$out"
  go build "${goflags[@]}" -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X $mod/version.Version=$v -X $mod/version.Revision=go-module-proxy" -o "$out/" "${pkgs[@]}"
  cd - >/dev/null
}

build_cni_plugins() {
  local v="$CNI_PLUGINS_VERSION" out="$cache/bin/cni-plugins-$CNI_PLUGINS_VERSION" b need=0
  local mod="github.com/containernetworking/plugins"
  for b in bridge host-local loopback; do has_version "$out/$b" "$v" || need=1; done
  if [[ $need == 0 ]]; then log "cni plugins $v: cached"; return; fi
  log "cni plugins $v: building"
  local dir="$work/cni-plugins-$v"
  rm -rf "$dir"; wrapper_module "$dir"
  cd "$dir"
  local pkgs=("$mod/plugins/main/bridge" "$mod/plugins/ipam/host-local" "$mod/plugins/main/loopback") p
  for p in "${pkgs[@]}"; do go get -tool "$p@$v" >/dev/null; done
  mkdir -p "$out"
  go build "${goflags[@]}" -ldflags "-s -w -X $mod/pkg/utils/buildversion.BuildVersion=$v" -o "$out/" "${pkgs[@]}"
  cd - >/dev/null
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(etcd kwok kubernetes helm csi prometheus)
start=$SECONDS
for t in "${targets[@]}"; do
  case "$t" in
    kubernetes) build_kubernetes ;;
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    helm) build_helm ;;
    csi) build_csi ;;
    prometheus) build_prometheus ;;
    e2e-test) build_e2e_test ;;
    kubelet) build_kubelet ;;
    containerd) build_containerd ;;
    cni-plugins) build_cni_plugins ;;
    node) build_kubelet; build_containerd; build_cni_plugins ;;
    *) log "unknown target $t (kubernetes, etcd, kwok, helm, csi, prometheus, e2e-test, kubelet, containerd, cni-plugins, node)"; exit 2 ;;
  esac
done
log "done in $((SECONDS - start)) s"
