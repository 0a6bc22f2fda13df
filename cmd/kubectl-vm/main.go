// Command kubectl-vm is the kubectl vm plugin; it also runs as a KRM
// function when kustomize or kpt call it with no arguments.
package main

import (
	"fmt"
	"os"

	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/cmd/render"
	"github.com/vmop/vmop/pkg/cmd/vm"
)

func main() {
	// kustomize and kpt run exec functions without arguments, with the
	// ResourceList on stdin; a person without arguments gets the help.
	if len(os.Args) == 1 && !term.IsTerminal(int(os.Stdin.Fd())) {
		if err := render.RunFunction(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
			os.Exit(1)
		}
		return
	}
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	if err := vm.NewCmd(vm.DisplayName(os.Args[0]), streams).Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
