package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// Group is VM-Operator's API group, kept so that its manifests apply.
	Group = "vmoperator.jdrupes.org"
	// Kind is the kind of a VirtualMachine.
	Kind = "VirtualMachine"
	// Resource is the plural resource name (kubectl get vms).
	Resource = "vms"
)

var (
	// SchemeGroupVersion is vmoperator.jdrupes.org/v1.
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: "v1"}
	// GroupVersionResource addresses VirtualMachines in dynamic clients.
	GroupVersionResource = SchemeGroupVersion.WithResource(Resource)
	// APIVersion is the apiVersion string of a VirtualMachine manifest.
	APIVersion = SchemeGroupVersion.String()

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &VirtualMachine{}, &VirtualMachineList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
