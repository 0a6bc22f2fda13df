//go:build tools

// Package tools pins the command that hack/build-csi.sh builds; the blank
// import keeps it in go.mod.
package tools

import _ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
