package v1_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/test/harness/hostile"
)

// The operator decodes what the API server sends with DecodeJSON: JSON
// that the server has decoded itself, so no BOM, no duplicate field and
// valid UTF-8, at most 3 MiB (its request limit). These cases check that
// anything else still gives an error or a defined result, within bounded
// memory. JSON has no aliases: a YAML bomb cannot reach the watch.

const hostileVMJSON = `{"apiVersion": "vmoperator.jdrupes.org/v1", "kind": "VirtualMachine",
 "metadata": {"name": "test-vm", "namespace": "vmop-demo"},
 "spec": {"cloudInit": {"userData": {"a": USERDATA}}, "vm": {"maximumCpus": 4, "currentCpus": 2}}}`

func hostileVM(userData string) string {
	return strings.Replace(hostileVMJSON, "USERDATA", userData, 1)
}

func TestHostileDecodeJSON(t *testing.T) {
	want, err := v1.DecodeJSON([]byte(hostileVM("1")))
	require.NoError(t, err)
	for _, c := range []struct {
		name, in string
		err      string // part of the error; none: the VM is want's
	}{
		{"100k nested arrays in user data", hostileVM(strings.Repeat("[", 100_000)), "exceeded max depth"},
		{"100k nested objects", strings.Repeat(`{"a":`, 100_000), "exceeded max depth"},
		{"duplicate field", strings.Replace(hostileVM("1"), `"maximumCpus": 4`, `"maximumCpus": 4, "maximumCpus": 8`, 1),
			`duplicate field "spec.vm.maximumCpus"`},
		{"BOM", "\ufeff" + hostileVM("1"), "invalid character"},
		{"CRLF", strings.ReplaceAll(hostileVM("1"), "\n", "\r\n"), ""},
		{"3 MiB of user data", hostileVM(`"` + strings.Repeat("x", 3<<20) + `"`), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got *v1.VirtualMachine
			var err error
			n := hostile.Allocated(func() { got, err = v1.DecodeJSON([]byte(c.in)) })
			t.Logf("allocated %.1f MiB", float64(n)/(1<<20))
			require.Less(t, n, uint64(hostile.MemoryBound))
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, want.Spec.VM, got.Spec.VM)
		})
	}
}

// TestHostileDecodeJSONInvalidUTF8: like the API server's own decoder,
// DecodeJSON replaces invalid UTF-8 with U+FFFD; validation then names the
// field if the value is not allowed there.
func TestHostileDecodeJSONInvalidUTF8(t *testing.T) {
	vm, err := v1.DecodeJSON([]byte(strings.Replace(hostileVM("1"), "test-vm", "test-\xff", 1)))
	require.NoError(t, err)
	require.Equal(t, "test-\ufffd", vm.Name)
}
