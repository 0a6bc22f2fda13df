#!/usr/bin/env bash
# Makes the release of VERSION, a tag such as v0.1.0: the krew archives
# and manifest in DIST (make krew), vmop's images pushed to REGISTRY
# (make push-images), and the tag's GitHub release holding the archives
# and manifest (gh release create). .github/workflows/release.yml runs it
# through "make release" on a tag; the tests run it with DRY_RUN=1.
#
#   hack/release.sh VERSION REGISTRY [DIST]     (DIST defaults to dist)
#
# DRY_RUN=1 prints the gh command instead of running it. The images are
# still pushed to REGISTRY: give a registry of your own, such as
# 127.0.0.1:5000/vmop, to rehearse a release without publishing anything.
set -euo pipefail

version=${1:?usage: $0 VERSION REGISTRY [DIST]}
registry=${2:?usage: $0 VERSION REGISTRY [DIST]}
dist=${3:-dist}
make=${MAKE:-make}
cd "$(dirname "$0")/.."

# krew first: it refuses a VERSION that is not a semantic version, before
# any image is pushed under that tag.
"$make" --no-print-directory krew VERSION="$version" DIST="$dist"
"$make" --no-print-directory push-images VERSION="$version" REGISTRY="$registry" DIST="$dist"

# The archives that the manifest names, not whatever else is in DIST.
mapfile -t archives < <(grep -o 'kubectl-vm_[a-z0-9_]*\.tar\.gz' "$dist/vm.yaml" | sort -u)
assets=("$dist/vm.yaml")
for a in "${archives[@]}"; do assets+=("$dist/$a"); done
release=(gh release create "$version" --verify-tag --title "vmop $version" --generate-notes "${assets[@]}")
if [[ -n ${DRY_RUN:-} ]]; then
	printf 'dry run, not run:'
	printf ' %q' "${release[@]}" # quoted to be pasted
	echo
else
	"${release[@]}"
fi
