package status

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/vmstatus"
)

// maxEvents is how many of a VM's events the report shows, the latest.
const maxEvents = 12

// Events are the recent events about a VM: about its VirtualMachine (the
// operator's and runner's) or, in GitOps mode, its StatefulSet, and about
// its pod (scheduling, image pulls, the kubelet's probes), oldest first.
// Core v1 lists events.k8s.io events too, the same objects.
func Events(ctx context.Context, c *vmclient.Client, vm *vmclient.VM, pod *corev1.Pod) ([]corev1.Event, error) {
	var uids []types.UID
	switch {
	case vm.Object != nil:
		uids = append(uids, vm.Object.GetUID())
	case vm.StatefulSet != nil:
		uids = append(uids, vm.StatefulSet.UID)
	}
	if pod != nil {
		uids = append(uids, pod.UID)
	}
	var all []corev1.Event
	for _, uid := range uids {
		sel := fields.OneTermEqualSelector("involvedObject.uid", string(uid)).String()
		list, err := c.Kube.CoreV1().Events(vm.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return nil, c.Explain(err)
		}
		all = append(all, list.Items...)
	}
	slices.SortStableFunc(all, func(a, b corev1.Event) int { return vmstatus.LastSeen(&a).Compare(vmstatus.LastSeen(&b)) })
	return all, nil
}

// firstSeen is when an event first happened.
func firstSeen(e corev1.Event) time.Time {
	if !e.FirstTimestamp.IsZero() {
		return e.FirstTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return vmstatus.LastSeen(&e)
}

// eventRows are the latest events as kubectl describe shows them; the
// second result counts the older ones left out.
func eventRows(now time.Time, events []corev1.Event) ([][]string, int) {
	left := max(0, len(events)-maxEvents)
	rows := make([][]string, 0, len(events)-left)
	for _, e := range events[left:] {
		age := Age(now, metav1.NewTime(vmstatus.LastSeen(&e)))
		if n := count(e); n > 1 {
			age = fmt.Sprintf("%s (x%d over %s)", age, n, Age(now, metav1.NewTime(firstSeen(e))))
		}
		from := cmp.Or(e.ReportingController, e.Source.Component, "<unknown>")
		rows = append(rows, []string{e.Type, e.Reason, age, from, oneLine(e.Message)})
	}
	return rows, left
}

// count is how often an event happened, whichever API wrote it.
func count(e corev1.Event) int32 {
	if e.Series != nil {
		return max(e.Series.Count, e.Count)
	}
	return e.Count
}
