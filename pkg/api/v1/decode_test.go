package v1_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// TestDecodeJSONStatusOfNewerVersion: a field that a newer vm-operator or
// runner writes into the status is left out; in the spec, or twice in the
// status, a field is an error.
func TestDecodeJSONStatusOfNewerVersion(t *testing.T) {
	const vm = `{"apiVersion": "vmoperator.jdrupes.org/v1", "kind": "VirtualMachine", "metadata": {"name": "a"},
 "spec": {"vm": {"maximumCpus": 2%s}}, "status": {"cpus": 2, "futureField": {"x": 1}, "conditions": [{"type": "Running", "futureToo": 1}]%s}}`
	got, err := v1.DecodeJSON(fmt.Appendf(nil, vm, "", ""))
	require.NoError(t, err)
	require.Equal(t, int32(2), got.Status.CPUs)
	require.Equal(t, "Running", got.Status.Conditions[0].Type)

	_, err = v1.DecodeJSON(fmt.Appendf(nil, vm, `, "maximumCPUs": 3, "typo": 1`, ""))
	require.EqualError(t, err, "unknown field \"spec.vm.maximumCPUs\"\nunknown field \"spec.vm.typo\"")

	_, err = v1.DecodeJSON(fmt.Appendf(nil, vm, "", `, "cpus": 3`))
	require.EqualError(t, err, `duplicate field "status.cpus"`)
}
