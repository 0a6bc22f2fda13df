// +k8s:deepcopy-gen=package
// +groupName=vmoperator.jdrupes.org

// Package v1 holds the vmoperator.jdrupes.org/v1 VirtualMachine API: its Go
// types, defaults, validation and the CRD. The field names are those of
// VM-Operator so that its manifests work unchanged. It imports nothing
// else of vmop's (.golangci.yml holds it so): what needs more, such as
// the runner image of a build, lives beside it (pkg/render).
package v1
