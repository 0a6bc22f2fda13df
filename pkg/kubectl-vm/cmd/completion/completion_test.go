package completion_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// run runs a root command with the completion command under it.
func run(t *testing.T, name string, args ...string) (stdout string, err error) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	root := &cobra.Command{Use: "vm", SilenceUsage: true, SilenceErrors: true}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(completion.NewCmd(name, streams))
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), err
}

func TestScripts(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "complete -o default -F __start_kubectl-vm kubectl-vm",
		"zsh":  "#compdef kubectl-vm",
		"fish": "complete -c kubectl-vm ",
	} {
		t.Run(shell, func(t *testing.T) {
			out, err := run(t, "kubectl vm", "completion", shell)
			require.NoError(t, err)
			require.Contains(t, out, want)
			require.Contains(t, out, "__complete", "the script asks the program for completions")
		})
	}
}

func TestErrors(t *testing.T) {
	out, err := run(t, "kubectl vm", "completion", "tcsh")
	require.EqualError(t, err, `unknown shell "tcsh": use one of bash, zsh, fish`)
	require.Empty(t, out)
	_, err = run(t, "kubectl vm", "completion")
	require.EqualError(t, err, "accepts 1 arg(s), received 0")
}

func TestShellsComplete(t *testing.T) {
	out, err := run(t, "kubectl vm", "__complete", "completion", "")
	require.NoError(t, err)
	require.Equal(t, "bash\nzsh\nfish\n:4\n", out)
}

// testRoot is a root with the kubectl flags and their completions, as
// kubectl vm has them, and two commands that complete VM names: "many
// NAME..." and "one NAME IMAGE".
func testRoot(t *testing.T, streams genericiooptions.IOStreams) *cobra.Command {
	configFlags := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{Use: "vm"}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	configFlags.AddFlags(root.PersistentFlags())
	require.NoError(t, root.RegisterFlagCompletionFunc("namespace", completion.Namespaces(configFlags)))
	require.NoError(t, root.RegisterFlagCompletionFunc("context", completion.Contexts(configFlags)))
	root.AddCommand(
		&cobra.Command{Use: "many", ValidArgsFunction: completion.VMNames(configFlags), Run: func(*cobra.Command, []string) {}},
		&cobra.Command{Use: "one", ValidArgsFunction: completion.VMName(configFlags), Run: func(*cobra.Command, []string) {}},
	)
	return root
}

// complete runs "vm __complete ARGS" on testRoot and returns the choices;
// every completion must forbid file names.
func complete(t *testing.T, args ...string) []string {
	t.Helper()
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	root := testRoot(t, streams)
	root.SetArgs(append([]string{"__complete"}, args...))
	require.NoError(t, root.Execute())
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Equal(t, ":4", lines[len(lines)-1], "directive NoFileComp")
	return lines[:len(lines)-1]
}

// TestUnreachable: a cluster that does not answer gives no completions,
// and no error, right away.
func TestUnreachable(t *testing.T) {
	kubeconfig := testcluster.UnreachableKubeconfig(t)
	start := time.Now()
	require.Empty(t, complete(t, "--kubeconfig", kubeconfig, "many", ""))
	require.Empty(t, complete(t, "--kubeconfig", kubeconfig, "-n", ""))
	require.Less(t, time.Since(start), completion.Timeout)
	require.Equal(t, []string{"gone"}, complete(t, "--kubeconfig", kubeconfig, "--context", ""))
	require.Empty(t, complete(t, "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--context", ""))
}
