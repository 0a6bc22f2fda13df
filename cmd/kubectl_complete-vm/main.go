// Command kubectl_complete-vm completes the arguments of the kubectl vm
// plugin. kubectl (1.26 or later) runs it from PATH when completing
// "kubectl vm ...", with the words after "vm" as arguments, the one being
// completed last (possibly ""), and shows what it prints in cobra's
// __complete format. So it is the plugin's own command tree asked with
// __complete: commands, flags and VM names complete as they do for
// "kubectl-vm __complete ...".
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/app"
)

func main() {
	cmd := app.NewCmd("kubectl vm", genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	cmd.SetArgs(append([]string{"__complete"}, os.Args[1:]...))
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
