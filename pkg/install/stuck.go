package install

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vmop/vmop/pkg/vmstatus"
)

var (
	podGVR   = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	eventGVR = schema.GroupVersionResource{Version: "v1", Resource: "events"}
)

// hostPathCheck is the kubelet's word for a hostPath volume whose path
// is not what its type asks: for the node agent, the kubelet's
// directories where --kubelet-root-dir says they are not.
const hostPathCheck = "hostPath type check failed"

// stuck says what keeps the pods of a workload (owner, e.g. "daemonset
// vm-node", its pods those selector picks in namespace) from running,
// one line each, with what to do where vmop knows: a container the node
// cannot pull or start, a pod no node takes, the kubelet's last warning
// about a pod (a volume it cannot mount), or a pod the controller cannot
// create. None while nothing is known to be wrong.
func (c *Cluster) stuck(ctx context.Context, namespace string, selector *metav1.LabelSelector, owner string) ([]string, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, err
	}
	list, err := c.client.Resource(podGVR).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	u, err := c.client.Resource(eventGVR).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var events corev1.EventList
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &events); err != nil {
		return nil, err
	}
	var lines []string
	kind, name, _ := strings.Cut(owner, " ")
	if e := latestWarning(events.Items, func(e *corev1.Event) bool {
		o := e.InvolvedObject
		return e.Reason == "FailedCreate" && strings.EqualFold(o.Kind, kind) && (o.Name == name || strings.HasPrefix(o.Name, name+"-"))
	}); e != nil {
		lines = append(lines, fmt.Sprintf("%s cannot create its pod: %s", owner, e.Message))
	}
	for _, item := range list.Items {
		var pod corev1.Pod
		if runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &pod) != nil || pod.DeletionTimestamp != nil {
			continue
		}
		if why := podStuck(&pod, events.Items); why != "" {
			where := "pod " + pod.Name
			if pod.Spec.NodeName != "" {
				where += " on node " + pod.Spec.NodeName
			}
			lines = append(lines, where+": "+why)
		}
	}
	return lines, nil
}

// podStuck is what keeps pod from running, "" if nothing is known to.
func podStuck(pod *corev1.Pod, events []corev1.Event) string {
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		w := cs.State.Waiting
		if w != nil && (slices.Contains(vmstatus.PullFailures, w.Reason) || slices.Contains(vmstatus.StartFailures, w.Reason) || w.Reason == "CrashLoopBackOff") {
			return fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
		}
	}
	for _, pc := range pod.Status.Conditions {
		if pc.Type == corev1.PodScheduled && pc.Status == corev1.ConditionFalse && pc.Reason == corev1.PodReasonUnschedulable {
			return "no node takes it: " + pc.Message
		}
	}
	if pod.Status.Phase != corev1.PodPending {
		return ""
	}
	e := latestWarning(events, func(e *corev1.Event) bool {
		return e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.UID == pod.UID
	})
	if e == nil {
		return ""
	}
	why := e.Reason + ": " + e.Message
	if strings.Contains(e.Message, hostPathCheck) {
		why += "; if the nodes' kubelet keeps its files elsewhere (its --root-dir), give that directory: kubectl vm install --kubelet-root-dir DIR"
	}
	return why
}

// latestWarning is the last seen of events' warnings that match, or nil.
func latestWarning(events []corev1.Event, match func(*corev1.Event) bool) *corev1.Event {
	var latest *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Type == corev1.EventTypeWarning && match(e) && (latest == nil || vmstatus.LastSeen(e).After(vmstatus.LastSeen(latest))) {
			latest = e
		}
	}
	return latest
}
