//go:build tools

// Package tools pins the commands that hack/build-csi.sh builds; the blank
// imports keep them in go.mod.
package tools

import (
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)
