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
# Only the first run on a machine pays the build (about 11 minutes on 2
# busy cores with a warm module cache); a built cache returns at once.
set -euo pipefail

snapshotter_version=v8.6.0
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools-cache.sh
. "$here/tools-cache.sh"
tools_cache csi "$0" "$here/tools-cache.sh" "$here"/csi/*/go.mod "$here"/csi/*/go.sum "$here"/csi/*/tools.go

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
