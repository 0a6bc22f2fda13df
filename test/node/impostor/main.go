// Command impostor looks like a VM pod's runner to vmop's node agent: it
// offers the agent's socket and asks for a pod network, as vm-runner
// does, from a pod that carries vmop's labels and volume but runs this
// image. It prints the agent's answer and the pod's interfaces, then
// waits to be deleted.
package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/vmop/vmop/pkg/nodeagent"
	"github.com/vmop/vmop/pkg/podnet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	_, err := nodeagent.Ask(ctx, filepath.Join(nodeagent.Dir, nodeagent.Socket), nodeagent.Request{
		PodNetwork: &podnet.Options{Net: netip.MustParsePrefix("10.0.2.0/24")},
	})
	fmt.Printf("answer: %v\n", err)
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		fmt.Printf("link: %s\n", l.Name())
	}
	<-ctx.Done()
}
