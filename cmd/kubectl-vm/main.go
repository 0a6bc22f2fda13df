// Command kubectl-vm is the kubectl vm plugin; it also runs as a KRM
// function when kustomize or kpt call it with no arguments.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"

	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/app"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/render"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/ssh"
)

func main() {
	// kustomize and kpt run exec functions without arguments, with the
	// ResourceList on stdin; without arguments or input, the help.
	in := bufio.NewReader(os.Stdin)
	if len(os.Args) == 1 && !term.IsTerminal(int(os.Stdin.Fd())) {
		if _, err := in.Peek(1); err == nil {
			if err := render.RunFunction(in, os.Stdout); err != nil {
				fmt.Fprintf(os.Stderr, "error: %v\n", err)
				os.Exit(1)
			}
			return
		}
	}
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	if len(os.Args) == 1 {
		// The help's stdin: what Peek read is in the buffer. Otherwise
		// the file itself, so that a command sees a terminal (console
		// --serial sets it raw).
		streams.In = in
	}
	if err := app.NewCmd(app.DisplayName(os.Args[0]), streams).Execute(); err != nil {
		// ssh has told why it ended: its code is the answer.
		if exit := (*ssh.ExitError)(nil); errors.As(err, &exit) {
			os.Exit(exit.Code)
		}
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
