package argocd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestFixtures runs the script on the objects test/e2e took from a live
// cluster (testdata/) and compares with health_test.yaml, as Argo CD's own
// tests of its health checks do.
func TestFixtures(t *testing.T) {
	dir, err := Dir()
	require.NoError(t, err)
	cases, err := ReadTestCases(filepath.Join(dir, "health_test.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, cases, "health_test.yaml lists no case")
	listed := map[string]bool{}
	for _, c := range cases {
		listed[c.InputPath] = true
		t.Run(c.InputPath, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, c.InputPath))
			require.NoError(t, err, "make it with VMOP_UPDATE_FIXTURES=1 go test ./test/e2e -run ArgoCD")
			var obj map[string]any
			require.NoError(t, yaml.Unmarshal(b, &obj))
			got, err := Health(obj)
			require.NoError(t, err)
			require.Equal(t, c.HealthStatus, got)
		})
	}
	files, err := filepath.Glob(filepath.Join(dir, "testdata", "*.yaml"))
	require.NoError(t, err)
	for _, f := range files {
		f, err := filepath.Rel(dir, f)
		require.NoError(t, err)
		require.True(t, listed[f], "%s is in no case of health_test.yaml", f)
	}
}

// TestSnippet: the argocd-cm snippet installs exactly health.lua, under
// the key Argo CD looks up for the VirtualMachine kind.
func TestSnippet(t *testing.T) {
	b, err := os.ReadFile("../../../examples/argocd/vmop/argocd-cm.yaml")
	require.NoError(t, err)
	var cm corev1.ConfigMap
	require.NoError(t, yaml.UnmarshalStrict(b, &cm))
	require.Equal(t, "ConfigMap", cm.Kind)
	require.Equal(t, "argocd-cm", cm.Name)
	require.Len(t, cm.Data, 1)
	script, ok := cm.Data["resource.customizations.health.vmoperator.jdrupes.org_VirtualMachine"]
	require.True(t, ok, "keys: %v", cm.Data)
	want, err := Script()
	require.NoError(t, err)
	require.Equal(t, want, script, "argocd-cm.yaml must hold health.lua byte for byte")
}

// TestSandbox: Health offers a script what Argo CD offers one from
// argocd-cm, and refuses what Argo CD would show as Unknown.
func TestSandbox(t *testing.T) {
	obj := map[string]any{"metadata": map[string]any{"generation": int64(3), "name": "vm"}, "spec": map[string]any{"list": []any{"a", nil, "b"}}}
	for _, c := range []struct {
		name, script string
		want         Status
		err          string
	}{
		{"obj is a table, int64 a number, nil items dropped",
			`return {status = "Healthy", message = obj.metadata.name .. (obj.metadata.generation + 1) .. #obj.spec.list}`,
			Status{Status: "Healthy", Message: "vm42"}, ""},
		{"base and table libraries", `local t = {} table.insert(t, tostring(1)) return {status = "Degraded", message = t[1]}`,
			Status{Status: "Degraded", Message: "1"}, ""},
		{"no string library", `return {status = "Healthy", message = string.upper("x")}`, Status{}, "with key 'upper'"},
		{"no os library", `return {status = "Healthy", message = os.getenv("HOME")}`, Status{}, "with key 'getenv'"},
		{"no io library", `io.write("x") return {status = "Healthy"}`, Status{}, "with key 'write'"},
		{"an unknown health code", `return {status = "Fine"}`, Status{}, `"Fine" is no Argo CD health code`},
		{"no table", `return "Healthy"`, Status{}, "not a table"},
		{"a message that is no string", `return {status = "Healthy", message = 1}`, Status{}, "hs.message"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := run(c.script, obj)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}
