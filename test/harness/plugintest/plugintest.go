// Package plugintest runs the kubectl vm plugin inside a test's process,
// as kubectl would run its binary, so that the commands' tests share one
// way of calling them.
package plugintest

import (
	"context"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/vm"
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
	cmd := vm.NewCmd("kubectl vm", streams)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return Result{Stdout: out.String(), Stderr: errOut.String(), Err: err}
}
