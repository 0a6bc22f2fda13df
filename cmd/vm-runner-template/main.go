// Command vm-runner-template expands a qemu command template for
// vm-runner, which runs it at each start of qemu: a runner.TemplateRequest
// (JSON) on stdin, qemu's arguments (a JSON array) on stdout. The logic
// is in pkg/vm-runner/expand, which says why it is a program of its own.
package main

import (
	"os"

	"github.com/vmop/vmop/pkg/vm-runner/expand"
)

func main() {
	os.Exit(expand.Main(os.Stdin, os.Stdout, os.Stderr))
}
