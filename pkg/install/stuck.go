package install

import (
	"context"
	"fmt"
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

// stuck says what keeps the pods of a workload (owner, e.g. "daemonset
// vm-node", its pods those selector picks in namespace) from running,
// one line each: a pod the controller cannot create, and
// vmstatus.PodsStuck. None while nothing is known to be wrong.
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
	if e := vmstatus.LatestWarning(events.Items, func(e *corev1.Event) bool {
		o := e.InvolvedObject
		return e.Reason == "FailedCreate" && strings.EqualFold(o.Kind, kind) && (o.Name == name || strings.HasPrefix(o.Name, name+"-"))
	}); e != nil {
		lines = append(lines, fmt.Sprintf("%s cannot create its pod: %s", owner, e.Message))
	}
	var pods corev1.PodList
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.UnstructuredContent(), &pods); err != nil {
		return nil, err
	}
	return append(lines, vmstatus.PodsStuck(pods.Items, events.Items)...), nil
}
