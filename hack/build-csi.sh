#!/usr/bin/env bash
# Builds the Kubernetes CSI snapshot machinery that the node tests run
# beside their own test CSI driver (test/harness/csidriver), from the module
# proxy at fixed versions, with the VolumeSnapshot CRDs those versions ship,
# into a cache keyed by this script and the tools modules under hack/csi/,
# and prints the directory:
#   snapshot-controller   external-snapshotter's
#   csi-snapshotter       external-snapshotter's sidecar
#   csi-provisioner       external-provisioner's sidecar
#   crd/                  snapshot.storage.k8s.io's CRDs
# Only the first run on a machine pays the build (about 6 minutes on 2
# cores with a warm module cache); a built cache returns at once.
set -euo pipefail

snapshotter_version=v8.6.0
here=$(cd "$(dirname "$0")" && pwd)
key=$(cat "$0" "$here"/csi/*/go.mod "$here"/csi/*/go.sum "$here"/csi/*/tools.go | sha256sum | cut -c1-16)
base=${VMOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}
cache=$base/csi-$key

mkdir -p "$base"
# Test binaries of several packages may call this at once: build once.
exec 9>"$base/.csi.lock"
flock 9
if [ -d "$cache" ]; then
	echo "$cache"
	exit 0
fi

# go.sum as committed (the modules were tidied with GOSUMDB=off: the proxy
# is all there is). The sidecars run on the test node's host, so they may
# be static like the rest.
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64 GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off
tmp=$cache.tmp
rm -rf "$tmp"
mkdir -p "$tmp"

# build MODULE_DIR PACKAGE
build() {
	echo "building $(basename "$2") into $cache (first run only)" >&2
	(cd "$here/csi/$1" && go build -trimpath -ldflags "-s -w" -o "$tmp/$(basename "$2")" "$2")
}
build snapshotter github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
build snapshotter github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter
build provisioner github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner

# The CRDs live in the client module, beside the API types.
client=$(cd "$here/csi/snapshotter" && go mod download -json "github.com/kubernetes-csi/external-snapshotter/client/v8@$snapshotter_version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
mkdir "$tmp/crd"
cp "$client"/config/crd/snapshot.storage.k8s.io_*.yaml "$tmp/crd/"
# The module cache's files are read-only.
chmod -R u+w "$tmp/crd"
# The directory last: it marks a complete build.
mv "$tmp" "$cache"
echo "$cache"
