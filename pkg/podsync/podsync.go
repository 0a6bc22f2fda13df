// Package podsync brings a changed ConfigMap or Secret into a running VM's
// pod at once.
//
// The runner reads its config from a projected volume (the VM's ConfigMap,
// display Secret and cloud-init Secret) and applies what changes there
// live. The kubelet refreshes such a volume only when it syncs the pod,
// which it does periodically (syncFrequency, 1 minute by default, plus
// jitter and its watch's delay: up to about 80 s) or whenever the pod
// object changes. So whoever changes one of those objects then changes the
// pod, with an annotation that holds the new resourceVersion: the kubelet
// syncs the pod at once, and the pod sync sets up its ConfigMap, Secret and
// projected volumes again from the kubelet's (watched) copies. The object
// must be written first, so that the kubelet has it when the sync runs.
//
// Without the right to patch pods the change still arrives, at the next
// periodic sync: callers warn, they do not fail.
package podsync

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
)

// Annotations on a VM's pod. Each holds the resourceVersion of the last
// write that it announces; only its change matters.
const (
	// AnnotationConfigVersion announces a change of the runner config in
	// the VM's ConfigMap (or of a Secret the operator writes for the
	// pod): written by vm-operator after it applied one, and by kubectl vm
	// set, cdrom and reset in GitOps mode.
	AnnotationConfigVersion = v1.Group + "/config-version"
	// AnnotationPasswordSerial announces a new display password in the
	// display Secret (kubectl vm console); VM-Operator does the same.
	AnnotationPasswordSerial = v1.Group + "/display-password-serial"
)

// Nudge merge-patches annotation: value onto the pod of VM vm in namespace
// ns (render.PodName), as fieldManager, so that the kubelet syncs the pod
// and refreshes its volumes now. value is the resourceVersion of the
// object just written. A VM without a pod (stopped) is no error: Nudge
// then returns false, and the pod that starts later mounts the new object.
func Nudge(ctx context.Context, pods corev1client.PodsGetter, ns, vm, annotation, value, fieldManager string) (bool, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotation: value}}})
	if err != nil {
		return false, err
	}
	_, err = pods.Pods(ns).Patch(ctx, render.PodName(vm), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
