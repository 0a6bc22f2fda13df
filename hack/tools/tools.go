//go:build tools

// Package tools pins the control-plane commands that hack/control-plane.sh
// builds; the blank imports keep them in go.mod.
package tools

import (
	_ "k8s.io/code-generator/cmd/deepcopy-gen"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
