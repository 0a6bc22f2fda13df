#!/usr/bin/env bash
# Builds etcd and kube-apiserver (and, with "all", kube-controller-manager,
# kube-scheduler, the kubelet, kube-proxy and the kwok node simulator with its
# Stage configs) from the module proxy into a cache keyed by version, and
# prints the directory that holds them. Only the first run on a machine pays
# the build: ~13 minutes, ~31 with "all" (etcd: 1 minute). kube-proxy shares most of its
# packages with the others: built after them it took 28 s (measured); alone
# with a cold Go build cache, 14 CPU-minutes (18 minutes on 2 busy cores).
set -euo pipefail

version=v1.37.0
kwok_version=v0.7.0
here=$(cd "$(dirname "$0")" && pwd)
cache=${VMOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}/kube-$version
bins=(kube-apiserver)
all=false
[ "${1:-}" = all ] && all=true && bins+=(kube-controller-manager kube-scheduler kubelet kube-proxy)

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

# etcd from its own module (hack/etcd/tools.go says why not Debian's).
# Its version is checked from the binary's build info, so that changing
# hack/etcd/go.mod rebuilds it.
etcd_version=$(sed -n 's/^require go\.etcd\.io\/etcd\/server\/v3 \(v[^ ]*\)$/\1/p' "$here/etcd/go.mod")
if ! go version -m "$cache/etcd" 2>/dev/null | grep -q "^[[:space:]]mod[[:space:]]go.etcd.io/etcd/server/v3[[:space:]]$etcd_version[[:space:]]"; then
	echo "building etcd $etcd_version into $cache (first run only)" >&2
	(cd "$here/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$cache/etcd.tmp" go.etcd.io/etcd/server/v3)
	mv "$cache/etcd.tmp" "$cache/etcd"
fi

# kwok needs k8s.io 0.33 modules, which the tools module (0.37) cannot also
# hold, so it is installed on its own. Its version is checked from the
# binary's build info, so that changing kwok_version rebuilds it.
if $all && ! go version -m "$cache/kwok" 2>/dev/null | grep -q "^[[:space:]]mod[[:space:]]sigs.k8s.io/kwok[[:space:]]$kwok_version[[:space:]]"; then
	echo "building kwok $kwok_version into $cache (first run only)" >&2
	# Outside any module, so that no go.mod or go.sum is touched.
	cd "$cache"
	rm -rf kwok kwok.tmp kwok-stages
	GOBIN=$cache/kwok.tmp go install "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
	# The Stage configs that make nodes Ready and pods Running ship in the
	# module, not in the binary.
	src=$(go mod download -json "sigs.k8s.io/kwok@$kwok_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	mkdir kwok-stages
	cp "$src/kustomize/stage/node/fast/node-initialize.yaml" \
		"$src"/kustomize/stage/pod/fast/pod-{ready,complete,delete}.yaml kwok-stages/
	chmod u+w kwok-stages/*
	# The binary last: it marks a complete install.
	mv kwok.tmp/kwok kwok
	rmdir kwok.tmp
fi
echo "$cache"
