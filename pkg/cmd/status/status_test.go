package status_test

import (
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/internal/golden"
	"github.com/vmop/vmop/pkg/cmd/status"
	"github.com/vmop/vmop/internal/vmtest"
	"github.com/vmop/vmop/pkg/cmd/vm"
)

// Golden files: testdata/status/<case>.txt; rewrite them with
// "go test ./pkg/cmd/status -update".

type result struct {
	stdout, stderr string
	err            error
}

// run runs "kubectl vm status ARGS" against e, with e's clock.
func run(t *testing.T, e *vmtest.Env, args ...string) result {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	// As vm.NewCmd makes it, but for the clock.
	root := &cobra.Command{Use: "vm", SilenceUsage: true, SilenceErrors: true}
	flags := genericclioptions.NewConfigFlags(false)
	flags.AddFlags(root.PersistentFlags())
	root.AddCommand(status.NewCmdWithClock("kubectl vm", flags, streams, e.Now))
	root.SetArgs(append([]string{"--kubeconfig", e.Kubeconfig, "status"}, args...))
	err := root.ExecuteContext(t.Context())
	return result{stdout: out.String(), stderr: errOut.String(), err: err}
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
			require.NoError(t, r.err)
			require.Empty(t, r.stderr)
			golden.Assert(t, filepath.Join("testdata", "status", tc.golden+".txt"), []byte(r.stdout))
		})
	}

	// A GitOps VM whose ConfigMap is gone still shows what it does.
	t.Run("gitops-no-configmap", func(t *testing.T) {
		require.NoError(t, e.Kube.CoreV1().ConfigMaps(vmtest.OtherNamespace).Delete(t.Context(), vmtest.Server, metav1.DeleteOptions{}))
		r := run(t, e, "-n", vmtest.OtherNamespace, vmtest.Server)
		require.NoError(t, r.err)
		golden.Assert(t, filepath.Join("testdata", "status", "gitops-no-configmap.txt"), []byte(r.stdout))
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
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			cmd := vm.NewCmd("kubectl vm", streams)
			cmd.SetArgs(append([]string{"--kubeconfig", e.Kubeconfig}, tc.args...))
			err := cmd.ExecuteContext(t.Context())
			require.Error(t, err)
			require.Equal(t, tc.err, err.Error())
			require.NotContains(t, err.Error(), "\n")
			require.Empty(t, out.String())
		})
	}
}

// TestHelp: the help shows how it is called, with examples.
func TestHelp(t *testing.T) {
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	cmd := vm.NewCmd("kubectl vm", streams)
	cmd.SetArgs([]string{"status", "--help"})
	require.NoError(t, cmd.Execute())
	require.Contains(t, out.String(), "kubectl vm status NAME [flags]")
	require.Contains(t, out.String(), "kubectl vm status test-vm")
	require.Contains(t, out.String(), "GitOps mode")
}
