package list

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/vmpod"
)

// What a drain of its node does to a VM, in the DRAIN column of --node.
const (
	drainBackAfterUncordon = "shuts down, back after uncordon"
	drainElsewhere         = "shuts down, starts on another node"
	drainWaits             = "waits for you (drain: " + v1.DrainWait + ")"
)

// onNode keeps the VMs whose pod runs on node and tells, by VM key
// (namespace/name), what a drain of the node does to each.
func (o *Options) onNode(ctx context.Context, vms []*vmclient.VM) ([]*vmclient.VM, map[string]string, error) {
	c := o.client
	ns := c.Namespace
	if o.AllNamespaces {
		ns = metav1.NamespaceAll
	}
	sel := metav1.ListOptions{LabelSelector: vmpod.LabelName + "=" + vmpod.NameRunner}
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: sel.LabelSelector,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", o.Node).String(),
	})
	if err != nil {
		return nil, nil, c.Explain(err)
	}
	if len(pods.Items) == 0 {
		return nil, nil, nil
	}
	// The budget that the drain annotation renders is what makes a drain
	// wait, in either mode (GitOps mode has no VirtualMachine to read).
	budgets, err := c.Kube.PolicyV1().PodDisruptionBudgets(ns).List(ctx, sel)
	if err != nil {
		return nil, nil, c.Explain(err)
	}
	waits := map[string]bool{}
	for _, b := range budgets.Items {
		waits[b.Namespace+"/"+b.Labels[vmpod.LabelInstance]] = true
	}
	drains := map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		key := p.Namespace + "/" + p.Labels[vmpod.LabelInstance]
		if waits[key] {
			drains[key] = drainWaits
			continue
		}
		pinned, err := o.pinned(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		drains[key] = drainElsewhere
		if pinned {
			drains[key] = drainBackAfterUncordon
		}
	}
	var kept []*vmclient.VM
	for _, vm := range vms {
		if _, ok := drains[vm.Namespace+"/"+vm.Name]; ok {
			kept = append(kept, vm)
		}
	}
	return kept, drains, nil
}

// pinned tells whether one of the pod's claims is bound to a volume that
// only its node has (local or hostPath, or one whose node affinity names
// a host), so that the VM can start nowhere else.
func (o *Options) pinned(ctx context.Context, pod *corev1.Pod) (bool, error) {
	c := o.client
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil {
			continue
		}
		name := vol.PersistentVolumeClaim.ClaimName
		pvc, err := c.Kube.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && pvc.Spec.VolumeName == "") {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("claim %s/%s: %w", pod.Namespace, name, c.Explain(err))
		}
		pv, err := c.Kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("volume of claim %s/%s: %w", pod.Namespace, name, c.Explain(err))
		}
		if nodeLocal(pv) {
			return true, nil
		}
	}
	return false, nil
}

// nodeLocal tells whether a volume lives on one node. Node affinity to a
// zone, as network block storage has, does not pin the VM to a node.
func nodeLocal(pv *corev1.PersistentVolume) bool {
	if pv.Spec.Local != nil || pv.Spec.HostPath != nil {
		return true
	}
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil {
		return false
	}
	for _, term := range a.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname {
				return true
			}
		}
	}
	return false
}
