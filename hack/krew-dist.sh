#!/usr/bin/env bash
# Builds the release archives of kubectl-vm for krew, one per platform of
# krew/vm.yaml, and writes the manifest that points at them, DIST/vm.yaml:
# the template krew/vm.yaml with the version and the archives' sha256
# filled in. Each archive holds kubectl-vm and the LICENSE. Run by "make krew".
#
#   hack/krew-dist.sh VERSION [DIST]     (DIST defaults to dist)
#
# KREW_PLATFORMS (e.g. "linux/amd64") builds only those platforms of the
# template, and the manifest lists only them: for trying krew locally
# without cross-building all four (the tests do, to spare a cold run).
#
# VERSION must be a semantic version with a leading v (krew requires it),
# the tag of the GitHub release that will hold the archives. Archives are
# reproducible (GNU tar): the same source, Go and VERSION give the same
# sums.
set -euo pipefail

version=${1:?usage: $0 VERSION [DIST]}
dist=${2:-dist}
if ! [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "$0: version \"$version\" is not a semantic version such as v0.1.0, as krew requires: make krew VERSION=v0.1.0" >&2
	exit 1
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

manifest=$(sed -n '/^apiVersion:/,$p' "$root/krew/vm.yaml") # without the template's comment
manifest=${manifest//'${VERSION}'/$version}
platforms=${KREW_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
for platform in $platforms; do
	os=${platform%/*} arch=${platform#*/}
	archive=kubectl-vm_${os}_${arch}.tar.gz
	mkdir "$work/$os-$arch"
	(cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch "${GO:-go}" build -trimpath \
		-ldflags "-s -w -X github.com/vmop/vmop/pkg/version.Version=$version" \
		-o "$work/$os-$arch/kubectl-vm" ./cmd/kubectl-vm)
	cp "$root/LICENSE" "$work/$os-$arch/" # the manifest's files: install it
	# Fixed owner, order and times (gzip -n: no name, no time) make the
	# archive depend on its contents only.
	tar -C "$work/$os-$arch" --sort=name --owner=0 --group=0 --numeric-owner \
		--mtime=@0 -cf - kubectl-vm LICENSE | gzip -n -9 >"$dist/$archive"
	sum=$(sha256sum "$dist/$archive" | cut -d' ' -f1)
	manifest=${manifest//"\${SHA256_${os}_${arch}}"/$sum}
	echo "$dist/$archive $sum"
done
if [[ -n ${KREW_PLATFORMS:-} ]]; then
	# Drop the template's platforms that were not built: each is a list
	# item from "  - selector:" to the next.
	manifest=$(awk -v built="$platforms" '
		BEGIN { n = split(built, b, " "); for (i = 1; i <= n; i++) { sub("/", "_", b[i]); keep["kubectl-vm_" b[i] ".tar.gz"] = 1 } }
		/^  - selector:/ { flush(); inItem = 1 }
		inItem && /^  [a-z]/ { flush(); inItem = 0 }
		inItem { item = item $0 "\n"; if (match($0, /kubectl-vm_[a-z0-9_]+\.tar\.gz/)) name = substr($0, RSTART, RLENGTH); next }
		{ print }
		END { flush() }
		function flush() { if (item != "" && (name in keep)) printf "%s", item; item = ""; name = "" }
	' <<<"$manifest")
fi
if grep -n '\${' <<<"$manifest" >&2; then
	echo "$0: krew/vm.yaml has placeholders that no build filled in (above)" >&2
	exit 1
fi
printf '%s\n' "$manifest" >"$dist/vm.yaml"
echo "$dist/vm.yaml"
