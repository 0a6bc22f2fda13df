#!/usr/bin/env bash
# Builds the GitOps controllers that the node tests run as pods, from the
# module proxy at fixed versions, with the install manifests those versions
# ship, into a cache keyed by this script and the tools modules under
# hack/gitops/, and prints the directory:
#   argocd                 Argo CD's multi-call binary (argocd-repo-server,
#                          argocd-application-controller, ... by argv[0])
#   source-controller      Flux's
#   kustomize-controller   Flux's
#   manifests/argocd/install.yaml
#   manifests/source-controller/, manifests/kustomize-controller/
#                          each controller's config/ tree (crd, manager,
#                          rbac, default, ...)
# Only the first run on a machine pays the build. Measured on 2 busy cores
# (2026-11-27) with a warm module cache: 12.6 minutes with an empty Go
# build cache (15.5 CPU-minutes; Argo CD alone ~8); 14 s when only this
# script changed (the Go build cache relinks); a built cache returns at
# once. The binaries (stripped): argocd 147 MB, source-controller 101 MB,
# kustomize-controller 86 MB; the same bytes from a cold and a warm build.
set -euo pipefail

argocd_version=v3.1.16
flux_version=v1.9.6
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools-cache.sh
. "$here/tools-cache.sh"
tools_cache gitops "$0" "$here/tools-cache.sh" "$here"/gitops/*/go.mod "$here"/gitops/*/go.sum "$here"/gitops/*/tools.go
mkdir "$tmp/manifests"

# build MODULE_DIR OUT PACKAGE [LDFLAGS]
build() {
	echo "building $3 into $cache (first run only)" >&2
	(cd "$here/gitops/$1" && go build -trimpath -ldflags "-s -w ${4:-}" -o "$tmp/$2" "$3")
}

# moddir MODULE_DIR MODULE@VERSION: where the module's files are.
moddir() {
	(cd "$here/gitops/$1" && go mod download -json "$2") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# As argo-cd's Makefile sets them: its VERSION file has no "v" (the
# version prints as v3.1.16+unknown, with no commit to show).
build argocd argocd github.com/argoproj/argo-cd/v3/cmd \
	"-X github.com/argoproj/argo-cd/v3/common.version=${argocd_version#v} \
-X github.com/argoproj/argo-cd/v3/common.kubectlVersion=$(cd "$here/gitops/argocd" && go list -m -f '{{.Version}}' k8s.io/client-go)"
build flux-source source-controller github.com/fluxcd/source-controller
build flux-kustomize kustomize-controller github.com/fluxcd/kustomize-controller

mkdir "$tmp/manifests/argocd"
cp "$(moddir argocd "github.com/argoproj/argo-cd/v3@$argocd_version")/manifests/install.yaml" "$tmp/manifests/argocd/"
cp -r "$(moddir flux-source "github.com/fluxcd/source-controller@$flux_version")/config" "$tmp/manifests/source-controller"
cp -r "$(moddir flux-kustomize "github.com/fluxcd/kustomize-controller@$flux_version")/config" "$tmp/manifests/kustomize-controller"
# The module cache's files are read-only.
chmod -R u+w "$tmp/manifests"
# The directory last: it marks a complete build.
mv "$tmp" "$cache"
echo "$cache"
