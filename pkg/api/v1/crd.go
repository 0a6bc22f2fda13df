package v1

import _ "embed"

// CRDManifest is the CustomResourceDefinition of VirtualMachine
// (vms.vmoperator.jdrupes.org) as YAML, ready to apply. Its schema mirrors
// the Go types of this package and holds no defaults: Default() sets them,
// so that what is stored stays what the manifest says.
//
//go:embed crd.yaml
var CRDManifest []byte
