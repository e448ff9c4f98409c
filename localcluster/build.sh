#!/usr/bin/env bash
# Build the local cluster's binaries from their Go modules (go.mod here pins every version)
# into a cache outside the clone, keyed by what decides the result, so a second clone on the
# same machine builds nothing. Prints the cache folder (bin/, crds/) on its last line.
#
#   localcluster/build.sh            build what is missing, with progress on stderr
#   localcluster/build.sh kwok       KWOK alone, for the benchmarks (kwok/ and its Stages)
#   GPU_PORTAL_CACHE=/path ...       cache root (default ~/.cache/gpu-portal)
#
# All binaries of the Kubernetes 1.35 line are built from this one module, one after the
# other, so the packages they share (client-go, apimachinery, ...) compile once; Trainer and
# JobSet (Kubernetes 0.36) from trainer/, the training operator (0.31) from its own folder.
set -euo pipefail
# A KUBECTL given relative to the caller's folder still names the same file after the cd.
[ -n "${KUBECTL:-}" ] && KUBECTL=$(realpath -m "$KUBECTL")
cd "$(dirname "$0")"
source versions.env

export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || {
  echo "localcluster: Go 1.25+ is needed to build the local cluster from its modules" \
    "(go not found on PATH or in /usr/local/go/bin)" >&2
  exit 1
}
what=${1:-cluster}
case "$what" in
  cluster)
    # KWOK's line and folder are left out: a KWOK bump rebuilds nothing of the cluster.
    key=$( (grep -v '^KWOK=' versions.env; cat go.mod go.sum build.sh trainer/go.mod trainer/go.sum \
      training-operator/go.mod training-operator/go.sum; go version) | sha256sum | cut -c1-16)
    out="${GPU_PORTAL_CACHE:-$HOME/.cache/gpu-portal}/localcluster/$key" ;;
  kwok)
    key=$( (grep '^KWOK=' versions.env; cat kwok/go.mod kwok/go.sum build.sh; go version) | sha256sum | cut -c1-16)
    out="${GPU_PORTAL_CACHE:-$HOME/.cache/gpu-portal}/kwok/$key" ;;
  *) echo "usage: $0 [kwok]" >&2; exit 2 ;;
esac
if [ -f "$out/complete" ]; then echo "$out"; exit 0; fi
mkdir -p "$out/bin" "$out/crds" "$out/log"
# One build at a time (parallel test processes, a second clone): the others wait for it.
exec 9>"$out/.lock"
flock 9
if [ -f "$out/complete" ]; then echo "$out"; exit 0; fi

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
minor=${KUBERNETES#v1.}; minor=${minor%%.*}
build_date=$(date -u -d "@$(stat -c %Y go.sum)" +%Y-%m-%dT%H:%M:%SZ)
# What upstream's hack/lib/version.sh stamps, so /version and `kubectl version` tell the truth
# (Kueue reads the server's version through discovery).
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$KUBERNETES -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

# name | module folder | package | extra ldflags
components=()
[ "$what" = kwok ] && components=("kwok|kwok|sigs.k8s.io/kwok/cmd/kwok|-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK")
[ "$what" = cluster ] && components=(
  "etcd|.|go.etcd.io/etcd/server/v3|-X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD"
  "kube-apiserver|.|k8s.io/kubernetes/cmd/kube-apiserver|"
  "kube-controller-manager|.|k8s.io/kubernetes/cmd/kube-controller-manager|"
  "kube-scheduler|.|k8s.io/kubernetes/cmd/kube-scheduler|"
  "kueue|.|sigs.k8s.io/kueue/cmd/kueue|-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE"
  "jobset|trainer|sigs.k8s.io/jobset|-X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET"
  "trainer-controller-manager|trainer|github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager|"
  "training-operator|training-operator|github.com/kubeflow/training-operator/cmd/training-operator.v1|"
)
total=${#components[@]}
started=$(date +%s)
i=0
for entry in "${components[@]}"; do
  IFS='|' read -r name dir pkg extra <<<"$entry"
  i=$((i + 1))
  if [ -x "$out/bin/$name" ]; then continue; fi
  t0=$(date +%s)
  echo "localcluster: [$i/$total] building $name (${pkg})..." >&2
  ( cd "$dir" && go build -trimpath -ldflags "$kube_ldflags $extra" -o "$out/bin/$name.tmp" "$pkg" ) \
    >"$out/log/$name.log" 2>&1 &
  pid=$!
  ticks=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    ticks=$((ticks + 1))
    if [ $((ticks % 15)) -eq 0 ] && kill -0 "$pid" 2>/dev/null; then
      now=$(date +%s)
      echo "localcluster: [$i/$total] $name $((now - t0))s (all: $((now - started))s)" >&2
    fi
  done
  if ! wait "$pid"; then
    echo "localcluster: building $name failed; its log ($out/log/$name.log):" >&2
    tail -n 30 "$out/log/$name.log" >&2
    exit 1
  fi
  mv "$out/bin/$name.tmp" "$out/bin/$name"
  echo "localcluster: [$i/$total] $name built in $(( $(date +%s) - t0 ))s" >&2
  echo "$name $(( $(date +%s) - t0 ))" >>"$out/log/times"
done

if [ "$what" = kwok ]; then
  # The Stages KWOK plays (its own YAML, from the same module): nodes become Ready at once and
  # heartbeat through Leases; pods are created and run; a Job's pods succeed after the delay
  # their annotations pod-complete.stage.kwok.x-k8s.io/delay and .../jitter-delay say (1-5 s
  # without them); pods are deleted when asked.
  stages=$(cd kwok && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
  rm -rf "$out/stages" && mkdir -p "$out/stages"
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/general/pod-create pod/general/pod-ready pod/general/pod-complete pod/general/pod-delete; do
    cp "$stages/$stage.yaml" "$out/stages/"
  done
  chmod -R u+w "$out/stages"
  touch "$out/complete"
  echo "localcluster: KWOK built in $(( $(date +%s) - started ))s into $out" >&2
  echo "$out"
  exit 0
fi

# The CRDs and the manifests the local cluster takes from the same modules' own YAML (the
# module cache holds their zips' files): base CRDs, the webhook configurations and Kueue's
# visibility APIService rendered by kustomize (kubectl's own), Trainer's runtimes.
kubectl=${KUBECTL:-$(command -v ../.venv/bin/kubectl || command -v kubectl || true)}
[ -n "$kubectl" ] || { echo "localcluster: kubectl is needed to render the manifests" >&2; exit 1; }
moddir() { (cd "${2:-.}" && go list -m -f '{{.Dir}}' "$1"); }
kueue=$(moddir sigs.k8s.io/kueue) jobset=$(moddir sigs.k8s.io/jobset trainer)
trainer=$(moddir github.com/kubeflow/trainer/v2 trainer)
operator=$(moddir github.com/kubeflow/training-operator training-operator)
# Downloaded outside any module, so no go.sum here changes.
gpuop=$( (cd "$(mktemp -d)" && go mod download -json "github.com/NVIDIA/gpu-operator@$GPU_OPERATOR") \
  | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
rm -rf "$out/crds" "$out/manifests" && mkdir -p "$out/crds" "$out/manifests"
cp "$kueue"/config/components/crd/bases/*.yaml "$jobset"/config/components/crd/bases/*.yaml \
  "$trainer"/manifests/base/crds/trainer.*.yaml "$operator"/manifests/base/crds/kubeflow.org_*.yaml \
  "$gpuop"/deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml "$out/crds/"
render() { "$kubectl" kustomize "$1" >"$out/manifests/$2.yaml"; }
render "$kueue/config/components/webhook" kueue-webhooks
render "$kueue/config/components/visibility" kueue-visibility
render "$jobset/config/components/webhook" jobset-webhooks
render "$trainer/manifests/base/webhook" trainer-webhooks
render "$trainer/manifests/base/runtimes" trainer-runtimes
render "$operator/manifests/base/webhook" training-operator-webhooks
chmod -R u+w "$out/crds" "$out/manifests"
touch "$out/complete"
# Keep the three newest builds (other clones may be at other versions); each is ~500 MB.
( cd "$out/.." && ls -dt -- */ | tail -n +4 | xargs -r rm -rf -- )
echo "localcluster: built in $(( $(date +%s) - started ))s into $out" >&2
echo "$out"
