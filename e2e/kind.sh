#!/usr/bin/env bash
# Run the e2e suite against a kind cluster: where Docker exists (CI here has none).
#
#   make kind-e2e            # or: bash e2e/kind.sh [pytest args]
#
# Creates a kind cluster, builds and loads the usher image, installs the chart
# with --wait (usher runs in the cluster as a Deployment with leader
# election), deploys a kwok controller for fake nodes, runs the e2e suite with
# USHER_KUBECONFIG pointing at the cluster, exports all logs to
# ${USHER_ARTIFACTS:-/tmp/usher-artifacts}/kind-<name>, and deletes the cluster.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
source "$here/versions.env"
cache="${USHER_CACHE:-$HOME/.cache/usher}"
bin="$cache/bin"
name="usher-e2e-$$"
artifacts="${USHER_ARTIFACTS:-/tmp/usher-artifacts}/kind-$name"
mkdir -p "$artifacts"

command -v docker >/dev/null || { echo "kind-e2e needs Docker" >&2; exit 2; }
kind="$bin/$KIND_VERSION/kind"
if [[ ! -x "$kind" ]]; then
  GOBIN="$bin/$KIND_VERSION" GOTOOLCHAIN=local go install "sigs.k8s.io/kind@$KIND_VERSION"
fi
helm="$bin/$HELM_VERSION/helm"
kubectl="$bin/$KUBERNETES_VERSION/kubectl"
bash "$here/build-binaries.sh" kubernetes helm

cleanup() {
  "$kind" export logs "$artifacts" --name "$name" || true
  "$kind" delete cluster --name "$name" || true
}
trap cleanup EXIT

"$kind" create cluster --name "$name" --image "${KIND_NODE_IMAGE:-kindest/node:$KUBERNETES_VERSION}" --wait 120s
kubeconfig="$artifacts/kubeconfig"
"$kind" get kubeconfig --name "$name" > "$kubeconfig"

docker build -t usher:e2e "$repo"
"$kind" load docker-image usher:e2e --name "$name"
"$helm" install usher "$repo/charts/usher" --kubeconfig "$kubeconfig" \
  --namespace usher-system --create-namespace \
  --set image.tag=e2e --set image.pullPolicy=Never --wait --timeout 5m

# kwok for fake nodes, with the same stages and annotation selector as the local harness.
"$kubectl" --kubeconfig "$kubeconfig" apply \
  -f "https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION/kwok.yaml" \
  -f "https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION/stage-fast.yaml"
"$kubectl" --kubeconfig "$kubeconfig" -n kube-system rollout status deployment/kwok-controller --timeout=180s

# Prometheus (e2e/test_real_node.py) runs on this machine and scrapes the pods' own addresses:
# route each kind node's pod CIDR to that node's address on Docker's network.
"$kubectl" --kubeconfig "$kubeconfig" get nodes -o \
  jsonpath='{range .items[*]}{.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}' |
  while read -r cidr address; do
    [[ -n "$cidr" && -n "$address" ]] && sudo ip route replace "$cidr" via "$address"
  done

cd "$repo"
# USHER_IMAGE_TAG: e2e/test_real_node.py installs its own release of the chart with the loaded image.
USHER_KUBECONFIG="$kubeconfig" USHER_IMAGE_TAG=e2e "$cache/venv/bin/pytest" e2e "$@"
