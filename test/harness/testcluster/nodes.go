package testcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startKwok runs kwok, which plays the kubelet of every Node, creates the
// nodes and waits until each is Ready.
func (c *Cluster) startKwok(ctx context.Context, nodes []string, timeout time.Duration) error {
	// The Stage configs hack/build-control-plane.sh copies next to kwok:
	// nodes become Ready, pods on them Running, deleted pods go away.
	stages, err := filepath.Glob(filepath.Join(c.BinDir, "kwok-stages", "*.yaml"))
	if err != nil {
		return err
	}
	if len(stages) == 0 {
		return fmt.Errorf("no kwok Stage configs in %s/kwok-stages (run hack/build-control-plane.sh all)", c.BinDir)
	}
	args := []string{"--kubeconfig=" + c.Kubeconfig, "--manage-all-nodes=true"}
	for _, s := range stages {
		args = append(args, "--config="+s)
	}
	p, err := c.StartProcess("kwok", filepath.Join(c.BinDir, "kwok"), args...)
	if err != nil {
		return err
	}
	c.Kwok = p

	for _, name := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// As a kubelet labels its node, for selectors of pods.
			Labels: map[string]string{
				corev1.LabelHostname: name,
				corev1.LabelOSStable: "linux",
			},
		}}
		if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
	}
	// One list per look: a thousand nodes' gets would load the API server.
	return WaitUntil(ctx, p, timeout, fmt.Sprintf("%d nodes", len(nodes)), func(ctx context.Context) error {
		list, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := map[string]bool{}
		for i := range list.Items {
			ready[list.Items[i].Name] = NodeReady(&list.Items[i])
		}
		for _, name := range nodes {
			if !ready[name] {
				return fmt.Errorf("node %s not Ready", name)
			}
		}
		return nil
	})
}

// NodeReady tells whether node reports the condition Ready.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
