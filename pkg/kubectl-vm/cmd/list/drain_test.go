package list

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/golden"
)

const drainNamespace = "vms"

// drainVM renders a running VM (annotated when it waits on a drain) and
// its pod on node, whose disk claim is bound to pv.
func drainVM(t *testing.T, name, node string, waits bool, pv *corev1.PersistentVolume) (*v1.VirtualMachine, []k8sruntime.Object) {
	t.Helper()
	vm := &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: drainNamespace,
			CreationTimestamp: metav1.Unix(0, 0)},
		Spec: v1.VirtualMachineSpec{VM: v1.VMSpec{State: v1.StateRunning}},
	}
	if waits {
		vm.Annotations = map[string]string{v1.AnnotationDrain: v1.DrainWait}
	}
	objs, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	sts := objs.StatefulSet
	sts.CreationTimestamp = vm.CreationTimestamp
	claim := "disk-" + render.PodName(name)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: render.PodName(name), Namespace: drainNamespace, Labels: sts.Spec.Template.Labels},
		Spec: corev1.PodSpec{NodeName: node, Volumes: []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: drainNamespace},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv.Name},
	}
	out := []k8sruntime.Object{sts, objs.ConfigMap, pod, pvc, pv}
	if objs.DisruptionBudget != nil {
		out = append(out, objs.DisruptionBudget)
	}
	return vm, out
}

// affinity requires a node label to be one of values.
func affinity(key string, values ...string) *corev1.VolumeNodeAffinity {
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}},
	}}}}
}

func volume(name string, spec corev1.PersistentVolumeSpec) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

// TestListNode: --node keeps the VMs whose pod runs on the node and tells
// what a drain does to each: local disks bring it back after uncordon,
// network storage (zone affinity is no node's) elsewhere, the drain
// annotation makes the drain wait. One VM is in operator mode, the others
// in GitOps mode, which has only the rendered budget to tell.
func TestListNode(t *testing.T) {
	csi := corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "rbd.csi.ceph.com", VolumeHandle: "h"}}
	var objs []k8sruntime.Object
	var vms []*vmclient.VM
	for _, c := range []struct {
		name, node string
		waits      bool
		pv         *corev1.PersistentVolume
		operator   bool
	}{
		{"local-path", "node-1", false, volume("pv-local-path", corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/local-path"}},
			NodeAffinity:           affinity(corev1.LabelHostname, "node-1")}), false},
		{"local", "node-1", false, volume("pv-local", corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disk"}}}), false},
		{"pinned-csi", "node-1", false, volume("pv-pinned-csi", corev1.PersistentVolumeSpec{
			PersistentVolumeSource: csi, NodeAffinity: affinity(corev1.LabelHostname, "node-1")}), false},
		{"ceph", "node-1", false, volume("pv-ceph", corev1.PersistentVolumeSpec{
			PersistentVolumeSource: csi, NodeAffinity: affinity(corev1.LabelTopologyZone, "a")}), true},
		{"waits", "node-1", true, volume("pv-waits", corev1.PersistentVolumeSpec{PersistentVolumeSource: csi}), false},
		{"other-node", "node-2", true, volume("pv-other-node", corev1.PersistentVolumeSpec{PersistentVolumeSource: csi}), false},
	} {
		vm, o := drainVM(t, c.name, c.node, c.waits, c.pv)
		objs = append(objs, o...)
		if c.operator {
			vm.Status.Node = c.node
			vm.Status.Conditions = []metav1.Condition{{Type: v1.ConditionRunning, Status: metav1.ConditionTrue, Reason: v1.ReasonRunning}}
			vms = append(vms, &vmclient.VM{Namespace: drainNamespace, Name: c.name, Mode: vmclient.ModeOperator, VM: vm})
		} else {
			vms = append(vms, &vmclient.VM{Namespace: drainNamespace, Name: c.name, Mode: vmclient.ModeGitOps, StatefulSet: o[0].(*appsv1.StatefulSet)})
		}
	}
	// In List's order.
	slices.SortFunc(vms, func(a, b *vmclient.VM) int { return strings.Compare(a.Name, b.Name) })
	kube := fake.NewClientset(objs...)
	kube.PrependReactor("list", "pods", nodePods(kube))
	var out, errOut bytes.Buffer
	o := &Options{
		Node:      "node-1",
		client:    &vmclient.Client{Kube: kube, Namespace: drainNamespace},
		IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut},
		now:       func() time.Time { return time.Unix(0, 0).Add(3 * time.Hour) },
	}
	require.NoError(t, o.show(t.Context(), vms))
	require.Empty(t, errOut.String())
	golden.Assert(t, filepath.Join("testdata", "list", "node.txt"), out.Bytes())

	out.Reset()
	o.Node = "node-3"
	require.NoError(t, o.show(t.Context(), vms))
	require.Empty(t, out.String())
	require.Equal(t, "No VMs found on node node-3 in vms namespace.\n", errOut.String())
}

// nodePods lists pods as the API server does: client-go's fake ignores a
// list's field selector, which --node asks by.
func nodePods(kube *fake.Clientset) k8stesting.ReactionFunc {
	return func(action k8stesting.Action) (bool, k8sruntime.Object, error) {
		la := action.(k8stesting.ListActionImpl)
		obj, err := kube.Tracker().List(la.GetResource(), la.GetKind(), la.GetNamespace(), la.ListOptions)
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		r := la.ListRestrictions
		var items []corev1.Pod
		for _, p := range list.Items {
			if r.Labels.Matches(labels.Set(p.Labels)) && r.Fields.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName}) {
				items = append(items, p)
			}
		}
		list.Items = items
		return true, list, nil
	}
}
