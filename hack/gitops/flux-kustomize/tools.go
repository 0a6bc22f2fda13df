//go:build tools

// Package tools pins the command that hack/build-gitops.sh builds; the blank
// import keeps it in go.mod.
package tools

import _ "github.com/fluxcd/kustomize-controller"
