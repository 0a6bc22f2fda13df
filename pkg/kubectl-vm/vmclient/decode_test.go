package vmclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// listed is a VM as the API server lists it: with managed fields and a
// status.
const listed = `{"apiVersion":"vmoperator.jdrupes.org/v1","kind":"VirtualMachine",
"metadata":{"name":"a","namespace":"lab","managedFields":[{"apiVersion":"vmoperator.jdrupes.org/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:vm":{}}},"manager":"kubectl","operation":"Update","time":"2026-11-30T02:10:00Z"}]},
"spec":{"vm":{"maximumCpus":2,"maximumRam":"1Gi"}},
"status":{"conditions":[{"lastTransitionTime":"2026-11-30T02:12:00Z","message":"m","observedGeneration":1,"reason":"Stopped","status":"False","type":"Running"}],"observedGeneration":1,"ram":"1Gi","cpus":2}}`

// TestDecodeStatusOfNewerVersion: the list decodes a VM whose status has a
// field of a newer vmop itself, not through v1.DecodeJSON.
func TestDecodeStatusOfNewerVersion(t *testing.T) {
	raw := strings.Replace(listed, `"cpus":2`, `"cpus":2,"future":{"a":1}`, 1)
	require.NotEqual(t, listed, raw)
	vm := &v1.VirtualMachine{}
	require.NoError(t, jsonv2.Unmarshal([]byte(raw), vm, listDecoding))
	require.Equal(t, int32(2), vm.Status.CPUs)
	require.Equal(t, "lab", vm.Namespace)
	require.Error(t, jsonv2.Unmarshal([]byte(strings.Replace(raw, `"maximumCpus":2`, `"maximumCpus":2,"future":1`, 1)), vm, listDecoding),
		"the spec stays strict")
}

// FuzzDecodeVM: the list's decoder takes what v1.DecodeJSON takes, to the
// same VM but for the managed fields, which it skips, and refuses what it
// refuses, in the same words.
func FuzzDecodeVM(f *testing.F) {
	f.Add([]byte(listed))
	for _, bad := range []string{
		`{"spec":{"vm":{"maximumCpus":2,"maximumcpus":3}}}`,
		`{"spec":{"vm":{"maximumCpus":2,"maximumCpus":3}}}`,
		`{"spec":{"vm":{"unknown":1}}}`,
		`{"spec":{"vm":{"maximumRam":"lots"}}}`,
		`{"metadata":{"name":"a\xff"}}`,
		`{"metadata":{"managedFields":[{"unknown":1}]}}`,
		`{"status":{"osinfo":{"a":[1,{}]}}}`,
		`{"status":{"future":1,"conditions":[{"type":"Running","future":{}}],"cpus":2}}`,
		`{"status":{"cpus":1,"cpus":2}}`,
		`null`,
	} {
		f.Add([]byte(bad))
	}
	inputs, _ := filepath.Glob("../../render/testdata/*/input.yaml")
	examples, _ := filepath.Glob("../../../examples/*.yaml")
	for _, name := range append(inputs, examples...) {
		data, err := os.ReadFile(name)
		require.NoError(f, err)
		for doc := range strings.SplitSeq(string(data), "\n---\n") {
			if j, err := yaml.YAMLToJSON([]byte(doc)); err == nil && strings.Contains(doc, "kind: VirtualMachine") {
				f.Add(j)
			}
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, wantErr := v1.DecodeJSON(raw)
		got, err := decodeVM(raw, &VM{})
		if wantErr != nil && strings.Contains(wantErr.Error(), "managedFields") {
			return // skipped, so not refused
		}
		if wantErr != nil {
			require.EqualError(t, err, wantErr.Error())
			return
		}
		require.NoError(t, err)
		want.ManagedFields = nil
		require.Equal(t, want, got)
	})
}
