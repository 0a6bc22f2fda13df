package render_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/plugintest"
)

// Golden files: testdata/render/<case>.stdout and <case>.stderr; the
// latter ends with the returned error as "error: ..." (what main prints).
// Rewrite them with "go test ./pkg/kubectl-vm/cmd/render -update".

// run runs "kubectl vm ARGS" in-process with stdin.
func run(t *testing.T, stdin string, args ...string) plugintest.Result {
	t.Helper()
	return plugintest.Run(t.Context(), stdin, args...)
}

func assertGolden(t *testing.T, name string, r plugintest.Result) {
	t.Helper()
	stderr := r.Stderr
	if r.Err != nil {
		stderr += "error: " + r.Err.Error() + "\n"
	}
	golden.Assert(t, filepath.Join("testdata", "render", name+".stdout"), []byte(r.Stdout))
	golden.Assert(t, filepath.Join("testdata", "render", name+".stderr"), []byte(stderr))
}

const inputs = "testdata/inputs/"

func TestRenderCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"file", []string{"-f", inputs + "test-vm.yaml"}},
		{"dir", []string{"-f", inputs + "dir"}},
		{"dir-recursive", []string{"-f", inputs + "dir", "-R"}},
		{"several-files", []string{"-f", inputs + "namespaced.yaml", "--filename=" + inputs + "test-vm.yaml"}},
		{"namespace", []string{"-n", "vmop-demo", "-f", inputs + "test-vm.yaml", "-f", inputs + "namespaced.yaml"}},
		{"warnings", []string{"-f", inputs + "ignored-fields.yaml"}},
		{"service-account", []string{"-f", inputs + "test-vm.yaml", "--service-account", "vm-runner"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", append([]string{"render"}, tc.args...)...)
			require.NoError(t, r.Err, r.Stderr)
			require.NotEmpty(t, r.Stdout)
			assertGolden(t, tc.name, r)
		})
	}
}

func TestRenderStdin(t *testing.T) {
	data, err := os.ReadFile(inputs + "test-vm.yaml")
	require.NoError(t, err)
	r := run(t, string(data), "render", "-f", "-")
	require.NoError(t, r.Err, r.Stderr)
	assertGolden(t, "stdin", r)
	file := run(t, "", "render", "-f", inputs+"test-vm.yaml")
	require.Equal(t, file.Stdout, r.Stdout, "stdin and file give the same output")
}

func TestRenderJSON(t *testing.T) {
	r := run(t, "", "render", "-o", "json", "-R", "-f", inputs+"dir")
	require.NoError(t, r.Err, r.Stderr)
	assertGolden(t, "json", r)
	require.True(t, json.Valid([]byte(r.Stdout)), "valid JSON")
	var list struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Items      []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &list))
	require.Equal(t, "v1", list.APIVersion)
	require.Equal(t, "List", list.Kind)

	// The same objects as the YAML output.
	y := run(t, "", "render", "-R", "-f", inputs+"dir")
	require.NoError(t, y.Err)
	var fromYAML []map[string]any
	rd := manifest.NewReader(strings.NewReader(y.Stdout))
	for {
		d, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		var obj map[string]any
		require.NoError(t, json.Unmarshal(d.JSON, &obj))
		fromYAML = append(fromYAML, obj)
	}
	if diff := cmp.Diff(fromYAML, list.Items); diff != "" {
		t.Errorf("-o json and -o yaml differ (-yaml +json):\n%s", diff)
	}

	// An input without objects still gives a valid, empty List.
	r = run(t, "", "render", "-o", "json", "-f", "-")
	require.NoError(t, r.Err)
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &list))
	require.Empty(t, list.Items)
}

// TestRenderNamespaceSet checks what the golden file shows: -n fills in the
// namespace of every object of a VM that had none.
func TestRenderNamespaceSet(t *testing.T) {
	r := run(t, "", "render", "-n", "other", "-f", inputs+"test-vm.yaml")
	require.NoError(t, r.Err)
	rd := manifest.NewReader(strings.NewReader(r.Stdout))
	n := 0
	for {
		d, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		var obj struct {
			Metadata struct{ Namespace string }
			Subjects []struct{ Namespace string }
		}
		require.NoError(t, json.Unmarshal(d.JSON, &obj))
		require.Equal(t, "other", obj.Metadata.Namespace, "%s", d.Raw)
		for _, s := range obj.Subjects { // the runner's RoleBinding
			require.Equal(t, "other", s.Namespace, "%s", d.Raw)
		}
		n++
	}
	require.Equal(t, 5, n, "the runner's ServiceAccount, Role and RoleBinding, ConfigMap and StatefulSet")
}

// Failures: nothing on stdout, every problem on stderr, an error returned.
func TestRenderErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		errHas  string
		linesIn []string // each must be a line of stderr
	}{
		{
			name:   "bad-input",
			args:   []string{"-f", inputs + "test-vm.yaml", "-f", inputs + "bad.yaml"},
			errHas: "4 problem(s)",
			linesIn: []string{
				`testdata/inputs/bad.yaml: document 1: bad-vm: spec.vm.state: Unsupported value: "Paused": supported values: "Running", "Stopped"`,
				`testdata/inputs/bad.yaml: document 1: bad-vm: spec.vm.currentCpus: Invalid value: 4: must not exceed maximumCpus (2)`,
				`testdata/inputs/bad.yaml: document 1: bad-vm: spec.vm.maximumRam: Invalid value: "4Gx": must be a quantity such as 4Gi or 512Mi`,
				`testdata/inputs/bad.yaml: document 3: typo-vm: unknown field "spec.vm.maximumRAM"`,
			},
		},
		{
			name:   "namespace-mismatch",
			args:   []string{"-n", "other", "-f", inputs + "namespaced.yaml"},
			errHas: "1 problem(s)",
			linesIn: []string{
				`testdata/inputs/namespaced.yaml: document 1: namespaced-vm: metadata.namespace: "vmop-demo" does not match the namespace "other" given with --namespace`,
			},
		},
		{name: "missing-file", args: []string{"-f", inputs + "missing.yaml"}, errHas: inputs + "missing.yaml"},
		{name: "bad-output", args: []string{"-f", inputs + "test-vm.yaml", "-o", "xml"}, errHas: "--output"},
		{name: "bad-namespace", args: []string{"-f", inputs + "test-vm.yaml", "-n", "Not_A_Namespace"}, errHas: "--namespace"},
		{name: "bad-service-account", args: []string{"-f", inputs + "test-vm.yaml", "--service-account", "Vm Runner"}, errHas: `--service-account "Vm Runner"`},
		{name: "no-input", args: nil, errHas: "-f"},
		{name: "extra-argument", args: []string{"-f", inputs + "test-vm.yaml", "test-vm"}, errHas: "test-vm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", append([]string{"render"}, tc.args...)...)
			require.Error(t, r.Err)
			require.Contains(t, r.Err.Error(), tc.errHas)
			require.Empty(t, r.Stdout, "no partial output")
			stderrLines := strings.Split(r.Stderr, "\n")
			for _, l := range tc.linesIn {
				require.Contains(t, stderrLines, l)
			}
			assertGolden(t, tc.name, r)
		})
	}
	// The bad-input problem count matches the lines printed.
	r := run(t, "", "render", "-f", inputs+"bad.yaml")
	require.Equal(t, strings.Count(r.Stderr, "\n"), 4)
}

// TestRenderLeavesNoTempFiles: Run renders into a temporary file first.
func TestRenderLeavesNoTempFiles(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	run(t, "", "render", "-f", inputs+"test-vm.yaml")
	run(t, "", "render", "-f", inputs+"bad.yaml")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestHelpName(t *testing.T) {
	r := run(t, "", "render", "--help")
	require.NoError(t, r.Err)
	require.Contains(t, r.Stdout, "kubectl vm render -f test-vm.yaml")
	require.True(t, bytes.Contains([]byte(r.Stdout), []byte("Usage:\n  kubectl vm render -f FILENAME")), r.Stdout)
}
