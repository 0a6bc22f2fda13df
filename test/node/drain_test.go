package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/eventually"
)

// TestDrainWaits: a VM annotated drain: wait keeps kubectl drain from
// evicting its pod, as docs/operator.md says, until a person stops it.
func TestDrainWaits(t *testing.T) {
	const ns, vm = "drain", "waits"
	installVmop(t)
	createNamespace(t, ns)
	addImageRepository(t, ns)
	addGuestDisk(t, ns, vm)
	manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "metadata:\n",
		"metadata:\n  annotations:\n    "+v1.AnnotationDrain+": "+v1.DrainWait+"\n", 1)
	kubectl(t, manifest, "apply", "-f", "-")
	defer deleteVM(t, ns, vm)
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), render.PodName(vm), metav1.GetOptions{})
	require.NoError(t, err)
	nodeName := pod.Spec.NodeName

	// The eviction API counts the pod once the disruption controller has.
	eventually.Within(t, time.Minute, func() string {
		pdb, err := node.Client.PolicyV1().PodDisruptionBudgets(ns).Get(t.Context(), vm, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if pdb.Status.ObservedGeneration != pdb.Generation || pdb.Status.ExpectedPods != 1 {
			return fmt.Sprintf("the budget's status is not current: %+v", pdb.Status)
		}
		return ""
	})
	require.Contains(t, kubectl(t, "", "vm", "list", "-n", ns, "--node", nodeName), "waits for you (drain: wait)")

	// The node is every test's: it must not stay cordoned.
	defer func() { _, _, _ = kubectlResult(context.Background(), "", "uncordon", nodeName) }()
	out, errOut, err := kubectlResult(t.Context(), "", "drain", nodeName, "--ignore-daemonsets", "--delete-emptydir-data",
		"--timeout", "20s", "--pod-selector", labels.SelectorFromSet(render.SelectorLabels(vm)).String())
	require.Error(t, err, "the drain must wait for the VM:\n%s", out)
	require.Contains(t, errOut, "Cannot evict pod as it would violate the pod's disruption budget")
	kubectl(t, "", "uncordon", nodeName)
	still, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, pod.UID, still.UID, "the VM's pod was not evicted")
	require.Nil(t, still.DeletionTimestamp)

	// Stopping deletes the pod, which no budget holds up.
	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "2m")
}
