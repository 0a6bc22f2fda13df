package list_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/list"
	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/vmopbin"
	"github.com/vmop/vmop/test/harness/vmtest"
)

// Golden files: testdata/list/<case>.txt; rewrite them with
// "go test ./pkg/kubectl-vm/cmd/list -update".

// run runs "kubectl vm ARGS" against e, with e's clock.
func TestMain(m *testing.M) {
	os.Exit(vmopbin.Main(m))
}

func run(t *testing.T, e *vmtest.Env, args ...string) plugintest.Result {
	t.Helper()
	return e.Run(t, func(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
		return list.NewCmdWithClock("kubectl vm", flags, streams, e.Now)
	}, args...)
}

// listObject is what -o json and -o yaml print.
type listObject struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Items      []map[string]any `json:"items"`
}

func TestList(t *testing.T) {
	e := vmtest.New(t)
	for _, tc := range []struct {
		golden string
		args   []string
		// columns: the VMs in operator mode are read as their printer
		// columns, whose AGE is the API server's (by its clock, not the
		// test's), so the table is compared without it; -o wide reads
		// whole VMs and the goldens' ages come from there.
		columns bool
	}{
		{"namespace", []string{"-n", vmtest.Namespace, "list"}, true},
		{"wide", []string{"-n", vmtest.Namespace, "list", "-o", "wide"}, false},
		{"all-namespaces", []string{"list", "-A"}, true},
		{"all-namespaces-wide", []string{"ls", "--all-namespaces", "-o", "wide"}, false},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			r := run(t, e, tc.args...)
			require.NoError(t, r.Err)
			require.Empty(t, r.Stderr)
			file := filepath.Join("testdata", "list", tc.golden+".txt")
			if !tc.columns {
				golden.Assert(t, file, []byte(r.Stdout))
				return
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err)
			require.Equal(t, withoutLastColumn(string(want)), withoutLastColumn(r.Stdout))
			for line := range strings.Lines(r.Stdout) {
				if f := strings.Fields(line); slices.Contains(f, "desktop") || slices.Contains(f, "stopped") {
					require.Regexp(t, `^[0-9]+s$`, f[len(f)-1], "the API server's age of a VM made seconds ago: %s", line)
				}
			}
		})
	}

	t.Run("empty", func(t *testing.T) {
		r := run(t, e, "-n", "default", "list")
		require.NoError(t, r.Err)
		require.Empty(t, r.Stdout)
		require.Equal(t, "No VMs found in default namespace.\n", r.Stderr)
		r = run(t, e, "-n", "default", "list", "-o", "json")
		require.NoError(t, r.Err)
		require.Empty(t, r.Stderr)
		require.JSONEq(t, `{"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": []}`, r.Stdout)
	})

	t.Run("json and yaml", func(t *testing.T) {
		r := run(t, e, "-n", vmtest.Namespace, "list", "-o", "json")
		require.NoError(t, r.Err)
		var fromJSON listObject
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &fromJSON))
		require.Equal(t, "v1", fromJSON.APIVersion)
		require.Equal(t, "List", fromJSON.Kind)
		var kinds []string
		for _, item := range fromJSON.Items {
			meta := item["metadata"].(map[string]any)
			kinds = append(kinds, item["kind"].(string)+" "+meta["name"].(string))
			require.NotContains(t, meta, "managedFields")
			require.Contains(t, item, "status", "like kubectl get, unlike a manifest")
		}
		require.Equal(t, []string{"VirtualMachine desktop", "StatefulSet gitops", "VirtualMachine stopped"}, kinds)
		require.Equal(t, 2.0, fromJSON.Items[0]["status"].(map[string]any)["cpus"])

		r = run(t, e, "-n", vmtest.Namespace, "list", "-o", "yaml")
		require.NoError(t, r.Err)
		var fromYAML listObject
		require.NoError(t, yaml.Unmarshal([]byte(r.Stdout), &fromYAML))
		if diff := cmp.Diff(fromJSON, fromYAML); diff != "" {
			t.Errorf("-o json and -o yaml differ (-json +yaml):\n%s", diff)
		}
	})

	// Errors come through the plugin's own root command, which also shows
	// that list is one of its commands.
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"bad output", []string{"list", "-o", "xml"}, `--output "xml" is not supported: use one of wide, yaml, json`},
		{"unreachable", []string{"--server", "https://127.0.0.1:1", "list"},
			`cannot reach the cluster at https://127.0.0.1:1: Get "https://127.0.0.1:1/apis/vmoperator.jdrupes.org/v1/namespaces/default/vms?includeObject=None": dial tcp 127.0.0.1:1: connect: connection refused`},
		{"forbidden", []string{"--as", "nobody", "list", "-A"},
			`vms.vmoperator.jdrupes.org is forbidden: User "nobody" cannot list resource "vms" in API group "vmoperator.jdrupes.org" at the cluster scope; ask a cluster administrator for that right`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := plugintest.Run(t.Context(), "", append([]string{"--kubeconfig", e.Kubeconfig}, tc.args...)...)
			require.Error(t, r.Err)
			require.Equal(t, tc.err, r.Err.Error())
			require.Empty(t, r.Stdout)
		})
	}

	t.Run("through kubectl", func(t *testing.T) { throughKubectl(t, e) })
}

// throughKubectl runs the built plugin as kubectl finds it on PATH: the
// table is the golden one (but for the real ages), and an error is one
// line on stderr with exit code 1.
func throughKubectl(t *testing.T, e *vmtest.Env) {
	bin := filepath.Dir(vmopbin.Build(t, "kubectl-vm"))
	prereq.Commands(t, "kubectl", "kubectl")
	kubectlBin, err := exec.LookPath("kubectl")
	require.NoError(t, err)
	kubectl := func(args ...string) (stdout, stderr string, code int) {
		// kubectl takes no flags before a plugin's name: the cluster is in
		// the environment.
		cmd := exec.CommandContext(t.Context(), kubectlBin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+e.Kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		var o, eo bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &eo
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return o.String(), eo.String(), code
	}

	stdout, stderr, code := kubectl("vm", "list", "-n", vmtest.Namespace)
	require.Zero(t, code, stderr)
	require.Empty(t, stderr)
	want, err := os.ReadFile(filepath.Join("testdata", "list", "namespace.txt"))
	require.NoError(t, err)
	require.Equal(t, withoutLastColumn(string(want)), withoutLastColumn(stdout))

	_, stderr, code = kubectl("vm", "list", "-n", vmtest.Namespace, "--as", "nobody")
	require.Equal(t, 1, code)
	require.Equal(t, `error: vms.vmoperator.jdrupes.org is forbidden: User "nobody" cannot list resource "vms" in API group "vmoperator.jdrupes.org" in the namespace "vms"; ask a cluster administrator for that right`+"\n", stderr)
}

// withoutLastColumn drops the AGE column, which depends on the clock.
func withoutLastColumn(table string) []string {
	var rows []string
	for line := range strings.Lines(table) {
		f := strings.Fields(line)
		rows = append(rows, strings.Join(f[:len(f)-1], " "))
	}
	return rows
}

// TestHelp: the help shows how it is called, with examples.
func TestHelp(t *testing.T) {
	r := plugintest.Run(t.Context(), "", "ls", "--help")
	require.NoError(t, r.Err)
	out := r.Stdout
	require.Contains(t, out, "kubectl vm list [flags]")
	require.Contains(t, out, "kubectl vm ls -A -o wide")
	require.Contains(t, out, "GitOps mode")
}
