// Command vm-runner will be vmop's program in each VM's pod (qemu over QMP); for now it
// only reports its version.
package main

import (
	"fmt"

	"github.com/vmop/vmop/pkg/version"
)

func main() {
	fmt.Println("vm-runner", version.Get())
}
