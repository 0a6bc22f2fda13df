// Command vm-runner runs one qemu VM from VM-Operator's runner config
// format: in a VM's pod, or stand-alone on any Linux host with qemu. The
// commands are in pkg/vm-runner/app.
package main

import (
	"os"

	"github.com/vmop/vmop/pkg/vm-runner/app"
)

func main() {
	os.Exit(app.Execute(os.Args[1:], os.Stdout, os.Stderr))
}
