// Package completion is shell completion for kubectl vm: the completion
// command, which prints a shell's completion script, and the completion
// functions that list VM names, namespaces and contexts for the other
// commands (see names.go).
package completion

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// Shells are the shells that completion writes scripts for.
var Shells = []string{"bash", "zsh", "fish"}

const long = `Print the shell completion script of kubectl-vm, run by that name.

"kubectl vm <TAB>" needs no script of its own: kubectl's completion (source
<(kubectl completion bash), kubectl 1.26 or later) asks the program
kubectl_complete-vm in PATH for what follows "kubectl vm". Install it next
to kubectl-vm (make build puts both into bin/); then commands, flags and VM
names complete after "kubectl vm" too.`

const example = `  # Complete kubectl-vm in the current bash
  source <(%[1]s completion bash)

  # For every zsh session (the directory must be in $fpath)
  %[1]s completion zsh > "${fpath[1]}/_kubectl-vm"

  # For every fish session
  %[1]s completion fish > ~/.config/fish/completions/kubectl-vm.fish`

// Options are the options of the completion command.
type Options struct {
	Shell string
	// Program is the command the script completes.
	Program string

	genericiooptions.IOStreams
}

// NewCmd makes the completion command. The script completes the binary
// kubectl-vm (a display name "kubectl vm" becomes that): the scripts are
// generic and ask the program itself, by "kubectl-vm __complete ...", so
// they only need its name.
func NewCmd(name string, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{IOStreams: streams}
	return &cobra.Command{
		Use:                   "completion " + strings.Join(Shells, "|"),
		Short:                 "Print the shell completion script",
		Long:                  long,
		Example:               fmt.Sprintf(example, name),
		Args:                  cobra.ExactArgs(1),
		ValidArgs:             Shells,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Complete(name, args)
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run()
		},
	}
}

// Complete takes the shell from the arguments and the program from the
// display name.
func (o *Options) Complete(name string, args []string) {
	o.Shell = args[0]
	o.Program = strings.ReplaceAll(name, " ", "-")
}

// Validate checks the shell.
func (o *Options) Validate() error {
	if !slices.Contains(Shells, o.Shell) {
		return fmt.Errorf("unknown shell %q: use one of %s", o.Shell, strings.Join(Shells, ", "))
	}
	return nil
}

// Run writes the script. It is generated for a bare command of the
// program's name: cobra's scripts take only the name from it.
func (o *Options) Run() error {
	program := &cobra.Command{Use: o.Program}
	switch o.Shell {
	case "bash":
		return program.GenBashCompletionV2(o.Out, true)
	case "zsh":
		return program.GenZshCompletion(o.Out)
	default: // fish, as Validate allows no other
		return program.GenFishCompletion(o.Out, true)
	}
}
