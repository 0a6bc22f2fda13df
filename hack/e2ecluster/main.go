// Command e2ecluster runs test/e2e's cluster (kwok nodes) for trying
// things by hand: etcd, kube-apiserver, kube-controller-manager and kwok
// playing the kubelet of node "node-1", with vmop's CRD installed. It
// prints the KUBECONFIG to use and runs until interrupted (make
// kwok-cluster).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/test/harness/testcluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2ecluster: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintln(os.Stderr, "starting the cluster (the first run builds its binaries: minutes)")
	c, err := testcluster.Start(ctx, testcluster.Options{
		CRDs:        [][]byte{v1.CRDManifest},
		Controllers: true,
		Nodes:       []string{"node-1"},
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Fprintf(os.Stderr, `cluster ready; logs in %s
There is no scheduler: pods (and VMs) need spec.nodeName: node-1.
Press Ctrl-C to stop it. In another shell:
`, c.Dir)
	fmt.Printf("export KUBECONFIG=%s\n", c.Kubeconfig)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "stopping")
	return nil
}
