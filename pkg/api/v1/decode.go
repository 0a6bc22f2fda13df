package v1

import (
	"errors"
	"slices"
	"strings"

	"sigs.k8s.io/json"
)

// IsVirtualMachine tells whether apiVersion and kind name a VirtualMachine.
func IsVirtualMachine(apiVersion, kind string) bool {
	return apiVersion == APIVersion && kind == Kind
}

// DecodeJSON decodes a VirtualMachine strictly: unknown and duplicate
// fields are errors (a typo must not silently drop a setting), each naming
// its field path. Unknown fields of the status are left out, not errors:
// vmop writes the status, not users, and a newer vm-operator or runner
// may write fields that this version does not know.
func DecodeJSON(data []byte) (*VirtualMachine, error) {
	vm := &VirtualMachine{}
	strict, err := json.UnmarshalStrict(data, vm)
	if err != nil {
		return nil, err
	}
	strict = slices.DeleteFunc(strict, unknownInStatus)
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	return vm, nil
}

// unknownInStatus tells a strict error about an unknown field of the
// status.
func unknownInStatus(err error) bool {
	var f json.FieldError
	return errors.As(err, &f) && strings.HasPrefix(f.FieldPath(), "status.") && strings.HasPrefix(err.Error(), "unknown field ")
}
