package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/render"
)

// EventPodSyncFailed is the reason of the Warning event on a VM whose pod
// the operator could not annotate after a live change (see syncPod).
const EventPodSyncFailed = "PodSyncFailed"

// syncPod annotates the VM's pod with podsync.AnnotationConfigVersion:
// resourceVersion after the operator wrote that version of an object that
// the pod's config volume projects (resourceVersion "": nothing written),
// so that the kubelet refreshes the volume and the runner applies the
// change within a second rather than at the kubelet's next periodic sync
// (up to about 80 s). Only a pod in the cache is annotated: a pod that
// starts later mounts the new objects, and a stopped VM (most VMs, when a
// new render version rewrites every ConfigMap) costs no request.
//
// A failure, e.g. an operator installed without the right to patch pods,
// does not fail the reconcile, since the change still arrives: it is
// logged and recorded as a Warning event on the VM (kubectl describe vm).
func (c *Controller) syncPod(ctx context.Context, vm *v1.VirtualMachine, resourceVersion string) {
	if resourceVersion == "" {
		return
	}
	pod, err := c.scopeOf(vm.Namespace).pods.Pods(vm.Namespace).Get(render.PodName(vm.Name))
	if err != nil || pod.DeletionTimestamp != nil {
		return
	}
	done, err := podsync.Nudge(ctx, c.kube.CoreV1(), vm.Namespace, vm.Name, podsync.AnnotationConfigVersion, resourceVersion, FieldManager)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Could not annotate the pod: the change reaches the runner at the kubelet's next periodic sync", "pod", pod.Name)
		c.events.Eventf(vm, pod, corev1.EventTypeWarning, EventPodSyncFailed, "AnnotatePod",
			"The change may take a minute to reach the runner: annotating pod %s with %s failed: %v", pod.Name, podsync.AnnotationConfigVersion, err)
		return
	}
	if done {
		c.events.Eventf(vm, pod, corev1.EventTypeNormal, EventLiveChange, "AnnotatePod",
			"Passed the changed spec on to the runner of the running VM (pod %s)", pod.Name)
		c.metrics.write("Pod")
		klog.FromContext(ctx).V(2).Info("Annotated the pod to refresh its config volume", "pod", pod.Name, "version", resourceVersion)
	}
}
