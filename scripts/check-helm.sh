#!/usr/bin/env bash
# Checks the Helm chart (deploy/helm/sluice) and the plain manifests rendered from it
# (deploy/kubernetes/sluice.yaml): helm lint --strict, helm template with several value
# sets held against the server's configuration and decoded strictly into the Kubernetes
# API's types (scripts/check_helm.py, scripts/kube-strict). Needs no cluster.
# Usage: bash scripts/check-helm.sh [--update]   (--update rewrites the plain manifests)
#
# helm: the pinned version, built once from the Go module proxy into target/tools
# (about 2 minutes on 2 cores with an empty Go cache; needs Go 1.21 or newer, which
# fetches the toolchain helm asks for). Python 3.11 or newer with PyYAML: as root,
# python3-yaml is installed with apt-get when missing. Anything missing fails.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v3.19.5
tools=$PWD/target/tools/helm-$HELM_VERSION
export HELM=$tools/helm
die() { echo "check-helm: $*" >&2; exit 1; }

if [ ! -x "$HELM" ]; then
  command -v go >/dev/null || die "helm $HELM_VERSION is built with Go (1.21 or newer), which is not installed"
  echo "building helm $HELM_VERSION into $tools (go install)"
  start=$SECONDS
  mkdir -p "$tools"
  if ! GOBIN=$tools GOFLAGS=-buildvcs=false go install -ldflags '-s -w' \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >"$tools/install.log" 2>&1; then
    tail -n 30 "$tools/install.log" >&2
    die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed (log: $tools/install.log)"
  fi
  echo "built helm in $((SECONDS - start)) s"
fi

# kube-strict (scripts/kube-strict): the renderings decoded strictly into the
# Kubernetes API's Go types. Rebuilt when its sources change.
export KUBE_STRICT=$PWD/target/tools/kube-strict
src=scripts/kube-strict
if [ ! -x "$KUBE_STRICT" ] || [ -n "$(find $src -newer "$KUBE_STRICT" -type f)" ]; then
  command -v go >/dev/null || die "$src is built with Go (1.21 or newer), which is not installed"
  echo "building $src"
  start=$SECONDS
  (cd $src && GOFLAGS=-buildvcs=false go build -ldflags '-s -w' -o "$KUBE_STRICT" .) \
    || die "go build in $src failed"
  echo "built kube-strict in $((SECONDS - start)) s"
fi

# An interpreter with tomllib (3.11) and PyYAML.
has_modules() { "$1" -c 'import tomllib, yaml' 2>/dev/null; }
python=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && has_modules "$p"; then python=$p; break; fi
done
if [ -z "$python" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing python3-yaml"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-yaml >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-yaml >/dev/null; }
  has_modules /usr/bin/python3 && python=/usr/bin/python3
fi
[ -n "$python" ] || die "needs Python 3.11 or newer with PyYAML (apt-get install python3-yaml, or pip install pyyaml)"

exec "$python" scripts/check_helm.py "$@"
