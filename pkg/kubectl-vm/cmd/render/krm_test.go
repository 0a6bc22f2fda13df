package render_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/render"
	"github.com/vmop/vmop/test/harness/golden"
)

// KRM cases: testdata/krm/<case>/input.yaml is the ResourceList on stdin,
// expected.yaml what the function writes.

func runFunction(t *testing.T, name string) (string, error) {
	t.Helper()
	in, err := os.ReadFile(filepath.Join("testdata", "krm", name, "input.yaml"))
	require.NoError(t, err)
	var out bytes.Buffer
	err = render.RunFunction(bytes.NewReader(in), &out)
	golden.Assert(t, filepath.Join("testdata", "krm", name, "expected.yaml"), out.Bytes())
	return out.String(), err
}

func TestFunction(t *testing.T) {
	out, err := runFunction(t, "render")
	require.NoError(t, err)
	rl, err := yaml.Parse(out)
	require.NoError(t, err)
	require.Equal(t, "ResourceList", rl.GetKind())
	require.Equal(t, "config.kubernetes.io/v1", rl.GetApiVersion())
	items, err := rl.Pipe(yaml.Lookup("items"))
	require.NoError(t, err)
	var kinds []string
	for _, it := range items.Content() {
		kinds = append(kinds, yaml.NewRNode(it).GetKind()+"/"+yaml.NewRNode(it).GetName())
	}
	require.Equal(t, []string{"ServiceAccount/test-vm-runner", "Role/test-vm-runner", "RoleBinding/test-vm-runner",
		"ConfigMap/test-vm", "Secret/test-vm-cloud-init", "StatefulSet/test-vm", "ConfigMap/unrelated"}, kinds)
	require.NotContains(t, out, "results:", "a clean run has no results")
}

func TestFunctionErrors(t *testing.T) {
	out, err := runFunction(t, "error")
	require.Error(t, err, "error results make the function fail")

	rl, perr := yaml.Parse(out)
	require.NoError(t, perr)
	resultsNode, perr := rl.Pipe(yaml.Lookup("results"))
	require.NoError(t, perr)
	require.NotNil(t, resultsNode, "results are written:\n%s", out)
	var results framework.Results
	require.NoError(t, yaml.Unmarshal([]byte(resultsNode.MustString()), &results))

	type res struct{ severity, name, field, msg string }
	var got []res
	for _, r := range results {
		f := ""
		if r.Field != nil {
			f = r.Field.Path
		}
		got = append(got, res{string(r.Severity), r.ResourceRef.Name, f, r.Message})
	}
	require.Contains(t, got, res{"error", "bad-vm", "spec.vm.currentCpus", "Invalid value: 4: must not exceed maximumCpus (2)"})
	require.Contains(t, got, res{"error", "bad-vm", "spec.vm.maximumRam", `Invalid value: "4Gx": must be a quantity such as 4Gi or 512Mi`})
	require.Contains(t, got, res{"warning", "good-vm", "", "spec.pools is only used by VM-Operator's web GUI and ignored"})
	require.Len(t, got, 3)

	// The error names what is wrong, for kustomize to show.
	require.Contains(t, err.Error(), "spec.vm.currentCpus")
	// On error the items are left as they came, VMs included: nothing is
	// half-rendered.
	require.Contains(t, out, "kind: VirtualMachine")
	require.False(t, strings.Contains(out, "kind: StatefulSet"), "no objects of the good VM either")
}
