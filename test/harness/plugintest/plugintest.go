// Package plugintest runs the kubectl vm plugin inside a test's process,
// as kubectl would run its binary, so that the commands' tests share one
// way of calling them.
package plugintest

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/app"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// Result is what a command printed and returned.
type Result struct {
	Stdout, Stderr string
	Err            error
}

// Run runs "kubectl vm ARGS" with stdin as its input.
func Run(ctx context.Context, stdin string, args ...string) Result {
	streams, in, out, errOut := genericiooptions.NewTestIOStreams()
	in.WriteString(stdin)
	cmd := app.NewCmd("kubectl vm", streams)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return Result{Stdout: out.String(), Stderr: errOut.String(), Err: err}
}

// GoldenYAML runs "kubectl vm ARGS -o yaml", which sends nothing, and
// requires it to succeed quietly and print the golden file's content.
// It returns what it printed.
func GoldenYAML(t testing.TB, file string, args ...string) string {
	t.Helper()
	r := Run(t.Context(), "", append(args, "-o", "yaml")...)
	require.NoError(t, r.Err, r.Stderr)
	require.Empty(t, r.Stderr)
	golden.Assert(t, file, []byte(r.Stdout))
	return r.Stdout
}

// RequireFails runs "kubectl vm COMMAND ARGS" in a subtest named by its
// args and requires an error that contains err, with nothing on stdout.
func RequireFails(t *testing.T, command string, args []string, err string) {
	t.Helper()
	t.Run(strings.Join(args, " "), func(t *testing.T) {
		r := Run(t.Context(), "", append([]string{command}, args...)...)
		require.ErrorContains(t, r.Err, err)
		require.Empty(t, r.Stdout)
	})
}

// StoppedVM makes namespace ns in c and, in it, the stopped VM web in
// GitOps mode (its StatefulSet only, as kubectl vm render makes it) with
// one disk, root, on a 1Gi claim of class local-block: what the disk
// commands' API server tests work on. It returns what render made.
func StoppedVM(t testing.TB, c *testcluster.Cluster, ns string) *render.Objects {
	t.Helper()
	require.NoError(t, c.CreateNamespace(t.Context(), ns))
	var vm v1.VirtualMachine
	require.NoError(t, yaml.UnmarshalStrict([]byte(`
metadata: {name: web}
spec:
  vm:
    disks:
    - volumeClaimTemplate:
        metadata: {name: root}
        spec:
          storageClassName: local-block
          resources: {requests: {storage: 1Gi}}
`), &vm))
	vm.Namespace = ns
	objs, err := render.Render(&vm, render.Options{})
	require.NoError(t, err)
	_, err = c.Client().AppsV1().StatefulSets(ns).Create(t.Context(), objs.StatefulSet, metav1.CreateOptions{})
	require.NoError(t, err)
	return objs
}
