package vmstatus

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// nodeAgentDaemonSet is the node agent's DaemonSet, in nodeAgentNamespace.
const nodeAgentDaemonSet = "vm-node"

// hostPathCheck is the kubelet's word for a hostPath volume whose path
// is not what its type asks: for the node agent, the kubelet's
// directories where --kubelet-root-dir says they are not.
const hostPathCheck = "hostPath type check failed"

// PodsStuck says what keeps each of pods (vmop's own: the node agent's,
// the operator's) from running, one line each, with what to do where vmop
// knows: a container the node cannot pull or start, a pod no node takes,
// or the kubelet's last warning about a pending pod (a volume it cannot
// mount). Nil while nothing is known to be wrong.
func PodsStuck(pods []corev1.Pod, events []corev1.Event) []string {
	var lines []string
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		if why := podStuck(pod, events); why != "" {
			where := "pod " + pod.Name
			if pod.Spec.NodeName != "" {
				where += " on node " + pod.Spec.NodeName
			}
			lines = append(lines, where+": "+why)
		}
	}
	return lines
}

// podStuck is what keeps pod from running, "" if nothing is known to.
func podStuck(pod *corev1.Pod, events []corev1.Event) string {
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		w := cs.State.Waiting
		switch {
		case w == nil:
		case slices.Contains(PullFailures, w.Reason):
			return fmt.Sprintf("container %s: %s: %s; check that the image exists and that the node reaches its registry "+
				"(a mirror: kubectl vm install --image-registry)", cs.Name, w.Reason, w.Message)
		case slices.Contains(StartFailures, w.Reason):
			return fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
		case w.Reason == "CrashLoopBackOff":
			// The back-off's message says only when it tries again.
			why := fmt.Sprintf("container %s: %s: failed %d times", cs.Name, w.Reason, cs.RestartCount)
			if t := cs.LastTerminationState.Terminated; t != nil {
				why += fmt.Sprintf(", last with exit code %d", t.ExitCode)
				if m := lastLine(t.Message); m != "" {
					why += ": " + m
				}
			}
			return fmt.Sprintf("%s; its log: kubectl logs -n %s %s -c %s --previous", why, pod.Namespace, pod.Name, cs.Name)
		}
	}
	if pc := unscheduled(pod); pc != nil {
		return "no node takes it: " + pc.Message
	}
	if pod.Status.Phase != corev1.PodPending {
		return ""
	}
	e := LatestWarning(events, func(e *corev1.Event) bool {
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

// lastLine is the last line of a container's termination message (its
// log's end, where a program says why it ended), "" if it is empty.
func lastLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// LatestWarning is the last seen of events' warnings that match, or nil.
func LatestWarning(events []corev1.Event, match func(*corev1.Event) bool) *corev1.Event {
	var latest *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Type == corev1.EventTypeWarning && match(e) && (latest == nil || LastSeen(e).After(LastSeen(latest))) {
			latest = e
		}
	}
	return latest
}

// NodeAgentStuck says what keeps the node agent's pods from running,
// read from its DaemonSet's namespace: why a VM waits for the agent. With
// node "" it is WorkloadStuck (a VM's pod that no node takes); else it
// is about the agent's pod on node, also when no reason is known: that
// the pod is not ready, or that there is none. Nil while the pod is
// ready. Reading that namespace is an administrator's right; the error
// says so.
func NodeAgentStuck(ctx context.Context, kube kubernetes.Interface, node string) ([]string, error) {
	ds, err := kube.AppsV1().DaemonSets(nodeAgentNamespace).Get(ctx, nodeAgentDaemonSet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return []string{fmt.Sprintf("namespace %s has no DaemonSet %s: kubectl vm install (--node-agent-only where no operator runs) installs it",
			nodeAgentNamespace, nodeAgentDaemonSet)}, nil
	}
	if err != nil {
		return nil, err
	}
	if node == "" {
		return WorkloadStuck(ctx, kube, nodeAgentNamespace, "DaemonSet", nodeAgentDaemonSet, ds.Spec.Selector)
	}
	pods, events, err := podsAndEvents(ctx, kube, nodeAgentNamespace, ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		pod := &pods[i]
		if pod.Spec.NodeName != node || pod.DeletionTimestamp != nil {
			continue
		}
		if podReady(pod) {
			return nil, nil
		}
		if lines := PodsStuck(pods[i:i+1], events); lines != nil {
			return lines, nil
		}
		return []string{fmt.Sprintf("pod %s on node %s is not ready (%s); kubectl describe pod -n %s %[1]s says why",
			pod.Name, node, pod.Status.Phase, nodeAgentNamespace)}, nil
	}
	return []string{fmt.Sprintf("daemonset %s has no pod on node %s; kubectl describe daemonset -n %s %[1]s says why",
		nodeAgentDaemonSet, node, nodeAgentNamespace)}, nil
}

// WorkloadStuck says what keeps the pods of a workload of vmop's (a
// DaemonSet or a Deployment called name in namespace, its pods those
// selector picks) from running, one line each: a pod its controller
// cannot create (a Deployment's ReplicaSets report it), and PodsStuck.
// None while nothing is known to be wrong.
func WorkloadStuck(ctx context.Context, kube kubernetes.Interface, namespace, kind, name string, selector *metav1.LabelSelector) ([]string, error) {
	pods, events, err := podsAndEvents(ctx, kube, namespace, selector)
	if err != nil {
		return nil, err
	}
	creator := kind
	if kind == "Deployment" {
		creator = "ReplicaSet"
	}
	var lines []string
	if e := LatestWarning(events, func(e *corev1.Event) bool {
		o := e.InvolvedObject
		return e.Reason == EventFailedCreate && o.Kind == creator && (o.Name == name || strings.HasPrefix(o.Name, name+"-"))
	}); e != nil {
		lines = append(lines, fmt.Sprintf("%s %s cannot create its pod: %s", strings.ToLower(kind), name, e.Message))
	}
	return append(lines, PodsStuck(pods, events)...), nil
}

// podsAndEvents are the pods of namespace that selector picks and the
// namespace's events.
func podsAndEvents(ctx context.Context, kube kubernetes.Interface, namespace string, selector *metav1.LabelSelector) ([]corev1.Pod, []corev1.Event, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, nil, err
	}
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, nil, err
	}
	events, err := kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	return pods.Items, events.Items, nil
}
