package v1

import (
	"errors"

	"sigs.k8s.io/json"
)

// IsVirtualMachine tells whether apiVersion and kind name a VirtualMachine.
func IsVirtualMachine(apiVersion, kind string) bool {
	return apiVersion == APIVersion && kind == Kind
}

// DecodeJSON decodes a VirtualMachine strictly: unknown and duplicate
// fields are errors (a typo must not silently drop a setting), each naming
// its field path.
func DecodeJSON(data []byte) (*VirtualMachine, error) {
	vm := &VirtualMachine{}
	strict, err := json.UnmarshalStrict(data, vm)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	return vm, nil
}
