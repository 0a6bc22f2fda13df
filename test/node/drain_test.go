package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
)

// TestDrain: a VM annotated drain: wait keeps kubectl drain from
// evicting its pod, as docs/operator.md says, until a person stops it or
// takes the annotation away; then the drain shuts its guest down cleanly,
// and the VM, whose disks are the node's, comes back after uncordon with
// every record its guest acknowledged.
func TestDrain(t *testing.T) {
	const ns, vm = "drain", "waits"
	installVmop(t)
	createNamespace(t, ns)
	addImageRepository(t, ns)
	addGuestDisk(t, ns, vm, recordWriter()...)
	manifest, records := withRecordsDisk(t, ns, vm, strings.Replace(fmt.Sprintf(guestVM, vm, ns), "metadata:\n",
		"metadata:\n  annotations:\n    "+v1.AnnotationDrain+": "+v1.DrainWait+"\n", 1))
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

	// Without the annotation, the drain evicts the pod: the guest shuts
	// down cleanly and, its disks being the node's, waits for uncordon.
	kubectl(t, "", "annotate", "vm", "-n", ns, vm, v1.AnnotationDrain+"-")
	eventually.Within(t, time.Minute, func() string {
		if out := kubectl(t, "", "vm", "list", "-n", ns, "--node", nodeName); !strings.Contains(out, "shuts down, back after uncordon") {
			return "kubectl vm list --node:\n" + out
		}
		return ""
	})
	acked := ackedRecords(t, ns, vm)
	drained := time.Now()
	out, errOut, err = kubectlResult(t.Context(), "", "drain", nodeName, "--ignore-daemonsets", "--delete-emptydir-data",
		"--timeout", "2m", "--pod-selector", labels.SelectorFromSet(render.SelectorLabels(vm)).String())
	require.NoError(t, err, "kubectl drain: %s%s", out, errOut)
	t.Logf("drain: kubectl drain took %.1f s", time.Since(drained).Seconds())
	requireEvents(t, ns, "vm/"+vm, "ShutdownCompleted")
	eventually.Within(t, time.Minute, func() string {
		p, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.UID == pod.UID || p.Status.Phase != corev1.PodPending {
			return fmt.Sprintf("pod %s: uid %s, %s", p.Name, p.UID, p.Status.Phase)
		}
		return ""
	})
	uncordoned := time.Now()
	kubectl(t, "", "uncordon", nodeName)
	waitConsole(t, ns, vm, testguest.BootPrefix+"2", 3*time.Minute)
	t.Logf("drain: the guest booted again %.0f s after uncordon (%.0f s after the drain began)",
		time.Since(uncordoned).Seconds(), time.Since(drained).Seconds())
	next := requireResumed(t, ns, vm, acked)
	all := requireRecordsKept(t, ns, vm, records, next)
	t.Logf("drain: %d records acknowledged before it, the guest went on at record %d (%d in all): 0 lost", acked, next, all)
	log, err := consoleLog(t.Context(), ns, vm)
	require.NoError(t, err)
	require.NotContains(t, log, "I/O error")
}
