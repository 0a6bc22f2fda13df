// Command nodecluster runs the tests' real single-node cluster for trying
// things by hand (make cluster): etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, a kubelet with containerd and
// runc, and vmop's images of this tree (version "devel") imported into its
// containerd. It prints the KUBECONFIG to use and runs until interrupted;
// then it undoes everything it changed on the host. It needs root.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/vmop/vmop/internal/imagebuild"
	"github.com/vmop/vmop/test/harness/testnode"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "nodecluster: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := testnode.Check(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "vmop-nodecluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(os.Stderr, "building vmop's images (the first run also builds the runner's Debian root and the control plane: minutes)")
	o, err := imagebuild.DevOptions(filepath.Join(dir, "images"))
	if err != nil {
		return err
	}
	built, err := imagebuild.Build(o)
	if err != nil {
		return err
	}
	var archives []string
	for _, b := range built {
		archives = append(archives, b.Archive)
		fmt.Fprintf(os.Stderr, "  %s\n", b.Ref)
	}
	n, err := testnode.Start(ctx, testnode.Options{Images: archives})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "stopping")
		if err := n.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "nodecluster: stopping: %v\n", err)
		}
	}()
	fmt.Fprintf(os.Stderr, `cluster ready: node %s (%s), storage classes %s (Block, WaitForFirstConsumer) and %s (default);
there are no PersistentVolumes yet: see examples/single-node. Logs in %s and %s.
Use the plugin of this tree (make build; PATH=$PWD/bin:$PATH). Ctrl-C stops the cluster. In another shell:
`, testnode.Name, testnode.IP, testnode.StorageClassBlock, testnode.StorageClassFilesystem, filepath.Dir(n.Kubelet.Log), n.Dir)
	fmt.Printf("export KUBECONFIG=%s\n", n.Kubeconfig)
	<-ctx.Done()
	return nil
}
