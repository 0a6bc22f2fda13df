package status_test

import (
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/status"
	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/vmtest"
)

// Golden files: testdata/status/<case>.txt; rewrite them with
// "go test ./pkg/kubectl-vm/cmd/status -update".

// run runs "kubectl vm status ARGS" against e, with e's clock.
func run(t *testing.T, e *vmtest.Env, args ...string) plugintest.Result {
	t.Helper()
	return e.Run(t, func(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
		return status.NewCmdWithClock("kubectl vm", flags, streams, e.Now)
	}, append([]string{"status"}, args...)...)
}

func TestStatus(t *testing.T) {
	e := vmtest.New(t)
	for _, tc := range []struct{ golden, namespace, vm string }{
		{"operator-running", vmtest.Namespace, vmtest.Desktop},
		{"operator-stopped", vmtest.Namespace, vmtest.Stopped},
		{"gitops-running", vmtest.Namespace, vmtest.GitOps},
		{"gitops-stopped", vmtest.OtherNamespace, vmtest.Server},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			r := run(t, e, "-n", tc.namespace, tc.vm)
			require.NoError(t, r.Err)
			require.Empty(t, r.Stderr)
			golden.Assert(t, filepath.Join("testdata", "status", tc.golden+".txt"), []byte(r.Stdout))
		})
	}

	// A GitOps VM whose ConfigMap is gone still shows what it does.
	t.Run("gitops-no-configmap", func(t *testing.T) {
		require.NoError(t, e.Kube.CoreV1().ConfigMaps(vmtest.OtherNamespace).Delete(t.Context(), vmtest.Server, metav1.DeleteOptions{}))
		r := run(t, e, "-n", vmtest.OtherNamespace, vmtest.Server)
		require.NoError(t, r.Err)
		golden.Assert(t, filepath.Join("testdata", "status", "gitops-no-configmap.txt"), []byte(r.Stdout))
	})

	// Errors come through the plugin's own root command, which also shows
	// that status is one of its commands.
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"unknown VM", []string{"-n", vmtest.Namespace, "status", "nope"},
			`virtual machine "nope" not found in namespace "vms": no VirtualMachine and no StatefulSet rendered by kubectl vm`},
		{"no name", []string{"status"}, "accepts 1 arg(s), received 0"},
		{"unreachable", []string{"--server", "https://127.0.0.1:1", "status", vmtest.Desktop},
			`cannot reach the cluster at https://127.0.0.1:1: Get "https://127.0.0.1:1/apis/vmoperator.jdrupes.org/v1/namespaces/default/vms/desktop": dial tcp 127.0.0.1:1: connect: connection refused`},
		{"forbidden", []string{"--as", "nobody", "-n", vmtest.Namespace, "status", vmtest.Desktop},
			`vms.vmoperator.jdrupes.org "desktop" is forbidden: User "nobody" cannot get resource "vms" in API group "vmoperator.jdrupes.org" in the namespace "vms"; ask a cluster administrator for that right`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := plugintest.Run(t.Context(), "", append([]string{"--kubeconfig", e.Kubeconfig}, tc.args...)...)
			require.Error(t, r.Err)
			require.Equal(t, tc.err, r.Err.Error())
			require.NotContains(t, r.Err.Error(), "\n")
			require.Empty(t, r.Stdout)
		})
	}
}

// TestHelp: the help shows how it is called, with examples.
func TestHelp(t *testing.T) {
	r := plugintest.Run(t.Context(), "", "status", "--help")
	require.NoError(t, r.Err)
	out := r.Stdout
	require.Contains(t, out, "kubectl vm status NAME [flags]")
	require.Contains(t, out, "kubectl vm status test-vm")
	require.Contains(t, out, "GitOps mode")
}
