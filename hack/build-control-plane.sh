#!/usr/bin/env bash
# Builds kube-apiserver (and, with "all", kube-controller-manager) from the
# module proxy into a cache keyed by version, and prints the directory that
# holds them. Only the first run on a machine pays the ~12 minute build.
set -euo pipefail

version=v1.37.0
here=$(cd "$(dirname "$0")" && pwd)
cache=${VMOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}/kube-$version
bins=(kube-apiserver)
[ "${1:-}" = all ] && bins+=(kube-controller-manager)

minor=${version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"

mkdir -p "$cache"
# Test binaries of several packages may call this at once: build once.
exec 9>"$cache/.lock"
flock 9
for b in "${bins[@]}"; do
	if [ ! -x "$cache/$b" ]; then
		echo "building $b $version into $cache (first run only)" >&2
		(cd "$here/tools" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" \
			-o "$cache/$b.tmp" "k8s.io/kubernetes/cmd/$b")
		mv "$cache/$b.tmp" "$cache/$b"
	fi
done
echo "$cache"
