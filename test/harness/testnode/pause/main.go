// Command pause is the pod sandbox's process on the test node: it holds the
// pod's namespaces, reaps children when the pod shares its process
// namespace, and exits on SIGTERM or SIGINT, as Kubernetes' own pause does.
// The test node builds its image locally, as no registry is reachable.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
