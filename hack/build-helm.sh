#!/usr/bin/env bash
# Builds helm from the module proxy into a cache keyed by version and prints
# the path of the binary: the render benchmark compares kubectl vm render
# with helm template. Only the first run on a machine pays the build.
set -euo pipefail

version=${VMOP_HELM_VERSION:-v3.22.0}
cache=${VMOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}/helm-$version

mkdir -p "$cache"
# Several benchmarks may call this at once: build once.
exec 9>"$cache/.lock"
flock 9
if [ ! -x "$cache/helm" ]; then
	echo "building helm $version into $cache (first run only)" >&2
	# Outside any module, so that no go.mod or go.sum is touched.
	cd "$cache"
	rm -rf helm.tmp
	GOBIN=$cache/helm.tmp go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$version"
	mv helm.tmp/helm helm
	rmdir helm.tmp
fi
echo "$cache/helm"
