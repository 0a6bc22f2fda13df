// Command vm-operator will be vmop's in-cluster controller; for now it
// only reports its version.
package main

import (
	"fmt"

	"github.com/vmop/vmop/pkg/version"
)

func main() {
	fmt.Println("vm-operator", version.Get())
}
