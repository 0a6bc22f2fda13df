package controller

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmpod"
)

// These tests follow kubernetes/sample-controller's controller_test.go:
// a fixture seeds fake clients and the informers' indexers (the informers
// do not run), one reconcile of a key runs, and the test checks the
// requests the clients got. kubefake.NewClientset keeps objects in a
// field-managed tracker, so the server-side applies of the rendered
// objects create and merge them as an API server would. The dynamic fake
// has no field manager (its tracker cannot apply to an Unstructured), so
// applyStatus stands in for the status subresource; the status is checked
// in the patch sent.

// fixture is what one reconcile sees: objects in the fake API servers and
// in the informers' caches (runner-labelled ones, as the operator's
// informers select).
type fixture struct {
	t *testing.T
	// vms are in the dynamic fake and the VM informer.
	vms []*unstructured.Unstructured
	// kubeObjects are in the fake clientset only; cached are also in the
	// informers.
	kubeObjects, cached []runtime.Object
	cfg                 Config

	kube   *kubefake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
	events *events.FakeRecorder
}

func newFixture(t *testing.T) *fixture { return &fixture{t: t} }

// newVM is a VM as the API server serves it; spec is under spec.vm.
func newVM(name string, vmSpec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.Kind,
		"metadata": map[string]any{
			"name": name, "namespace": "ns", "uid": "uid-" + name,
			"generation": int64(3), "resourceVersion": "5",
		},
		"spec": map[string]any{"vm": vmSpec},
	}}
	return u
}

// addVM puts vm into the fake and the cache.
func (f *fixture) addVM(vm *unstructured.Unstructured) { f.vms = append(f.vms, vm) }

// addCached puts objects into the fake and the cache.
func (f *fixture) addCached(objs ...runtime.Object) {
	f.kubeObjects = append(f.kubeObjects, objs...)
	f.cached = append(f.cached, objs...)
}

// rendered returns what vm renders to, owned by it, as a previous
// reconcile would have applied it.
func (f *fixture) rendered(u *unstructured.Unstructured) *render.Objects {
	f.t.Helper()
	vm, err := decodeVM(u)
	require.NoError(f.t, err)
	objs, err := render.Render(vm, render.Options{})
	require.NoError(f.t, err)
	for _, o := range objs.List() {
		o.(metav1.Object).SetOwnerReferences([]metav1.OwnerReference{ownerReference(vm)})
	}
	return objs
}

// newController makes the controller with New and seeds the indexers of
// the informers it made (a factory returns one informer per type).
func (f *fixture) newController() *Controller {
	f.t.Helper()
	f.kube = kubefake.NewClientset(f.kubeObjects...)
	gvr := v1.GroupVersionResource
	f.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: v1.Kind + "List"})
	f.dyn.PrependReactor("patch", gvr.Resource, f.applyStatus)
	for _, vm := range f.vms {
		// Under the CRD's resource name, which the fake cannot guess.
		require.NoError(f.t, f.dyn.Tracker().Create(gvr, vm.DeepCopy(), vm.GetNamespace()))
	}
	c := New(f.kube, f.dyn, f.cfg)
	f.events = events.NewFakeRecorder(20)
	c.events = f.events

	for _, vm := range f.vms {
		f.store(c, vm)
	}
	f.store(c, f.cached...)
	return c
}

// store puts objects into c's informer caches, through the informers'
// transforms as they fill them.
func (f *fixture) store(c *Controller, objs ...runtime.Object) {
	f.t.Helper()
	require.Len(f.t, c.factories, 2)
	kf := c.factories[0].(informers.SharedInformerFactory)
	df := c.factories[1].(dynamicinformer.DynamicSharedInformerFactory)
	add := func(inf cache.SharedIndexInformer, obj runtime.Object, transform cache.TransformFunc) {
		cached, err := transform(obj.DeepCopyObject())
		require.NoError(f.t, err)
		require.NoError(f.t, inf.GetIndexer().Update(cached))
	}
	for _, obj := range objs {
		switch obj.(type) {
		case *unstructured.Unstructured:
			add(df.ForResource(v1.GroupVersionResource).Informer(), obj, cacheVM)
		case *appsv1.StatefulSet:
			add(kf.Apps().V1().StatefulSets().Informer(), obj, trim)
		case *corev1.ConfigMap:
			add(kf.Core().V1().ConfigMaps().Informer(), obj, trim)
		case *corev1.Secret:
			add(kf.Core().V1().Secrets().Informer(), obj, trim)
		case *corev1.Service:
			add(kf.Core().V1().Services().Informer(), obj, trim)
		case *policyv1.PodDisruptionBudget:
			add(kf.Policy().V1().PodDisruptionBudgets().Informer(), obj, trim)
		case *corev1.Pod:
			add(kf.Core().V1().Pods().Informer(), obj, trim)
		default:
			f.t.Fatalf("no informer for %T", obj)
		}
	}
}

// applyStatus serves an apply of a VM's status: the fields of status in
// the patch replace the VM's, as for an apply by the only manager of
// status; the rest of the VM stays, and its resourceVersion grows as an
// API server's does (the write cache compares them).
func (f *fixture) applyStatus(a k8stesting.Action) (bool, runtime.Object, error) {
	p := a.(k8stesting.PatchAction)
	if p.GetSubresource() != "status" || p.GetPatchType() != types.ApplyPatchType {
		return false, nil, nil
	}
	var patch struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(p.GetPatch(), &patch); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	obj, err := f.dyn.Tracker().Get(p.GetResource(), p.GetNamespace(), p.GetName())
	if err != nil {
		return true, nil, err
	}
	u := obj.(*unstructured.Unstructured)
	status, _, _ := unstructured.NestedMap(u.Object, "status")
	if status == nil {
		status = map[string]any{}
	}
	maps.Copy(status, patch.Status)
	u.Object["status"] = status
	rv, err := strconv.Atoi(u.GetResourceVersion())
	if err != nil {
		return true, nil, err
	}
	u.SetResourceVersion(strconv.Itoa(rv + 1))
	return true, u, f.dyn.Tracker().Update(p.GetResource(), u, p.GetNamespace())
}

// run reconciles the key of VM name once.
func (f *fixture) run(c *Controller, name string) (time.Duration, error) {
	return c.reconcile(f.t.Context(), cache.ObjectName{Namespace: "ns", Name: name})
}

// actions are the requests both fakes got, as "verb resource name" (the
// subresource after a slash).
func (f *fixture) actions() []string {
	var out []string
	for _, a := range append(f.kube.Actions(), f.dyn.Actions()...) {
		res := a.GetResource().Resource
		if a.GetSubresource() != "" {
			res += "/" + a.GetSubresource()
		}
		s := a.GetVerb() + " " + res
		switch a := a.(type) {
		case k8stesting.CreateAction:
			s += " " + a.GetObject().(metav1.Object).GetName()
		case k8stesting.PatchAction:
			s += " " + a.GetName()
			if a.GetPatchType() != types.ApplyPatchType {
				s += " (" + string(a.GetPatchType()) + ")"
			}
		case k8stesting.DeleteAction:
			s += " " + a.GetName()
		case k8stesting.GetAction: // after Patch and Delete, which have GetName too
			s += " " + a.GetName()
		}
		out = append(out, s)
	}
	return out
}

// recorded empties the event recorder.
func (f *fixture) recorded() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// status is the operator's status in the last status patch sent.
func (f *fixture) status() opStatus {
	f.t.Helper()
	var last k8stesting.PatchAction
	for _, a := range f.dyn.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetSubresource() == "status" {
			last = p
		}
	}
	require.NotNil(f.t, last, "no status written")
	require.Equal(f.t, types.ApplyPatchType, last.GetPatchType())
	var body struct {
		APIVersion, Kind string
		Status           opStatus
	}
	require.NoError(f.t, json.Unmarshal(last.GetPatch(), &body))
	require.Equal(f.t, v1.APIVersion, body.APIVersion)
	return body.Status
}

// conditions are a status's conditions as "Type=Status Reason: message".
func conditions(st opStatus) []string {
	var out []string
	for _, c := range st.Conditions {
		out = append(out, c.Type+"="+string(c.Status)+" "+c.Reason+": "+c.Message)
	}
	return out
}

// kstatusOf is how kstatus, the library of Flux's health checks, reads a
// VM whose status is st (of its latest generation).
func kstatusOf(t *testing.T, st opStatus) kstatus.Status {
	t.Helper()
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.Kind,
		"metadata": map[string]any{"name": "vm", "generation": st.ObservedGeneration},
		"status":   raw,
	}}
	res, err := kstatus.Compute(u)
	require.NoError(t, err)
	return res.Status
}

func condition(t *testing.T, st opStatus, typ string) metav1.Condition {
	t.Helper()
	c := findCondition(st.Conditions, typ)
	require.NotNil(t, c, "no %s condition in %v", typ, conditions(st))
	return *c
}

func runnerAccess(ns string) (*corev1.ServiceAccount, *rbacv1.RoleBinding) {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "vm-runner", Namespace: ns}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "vm-runner", Namespace: ns}}
}

func TestReconcileNewRunningVM(t *testing.T) {
	f := newFixture(t)
	f.cfg.RunnerAccess = runnerAccess
	vm := newVM("vm", map[string]any{"state": "Running"})
	vm.Object["spec"].(map[string]any)["cloudInit"] = map[string]any{"userData": map[string]any{"hostname": "h"}}
	vm.Object["spec"].(map[string]any)["loadBalancerService"] = map[string]any{}
	f.addVM(vm)
	c := f.newController()

	requeue, err := f.run(c, "vm")
	require.NoError(t, err)
	require.Equal(t, pendingRecheck, requeue, "no pod yet: look again")
	require.Equal(t, []string{
		"get serviceaccounts vm-runner", "create serviceaccounts vm-runner",
		"get rolebindings vm-runner", "create rolebindings vm-runner",
		// ConfigMap and cloud-init Secret before the StatefulSet that
		// mounts them; the display Secret after it (the display is locked
		// without one), so that a start reaches it one write sooner.
		"patch configmaps vm", "patch secrets vm-cloud-init", "patch statefulsets vm", "patch services vm",
		"create secrets vm-display-secret",
		"patch vms/status vm",
	}, f.actions())

	ctx := t.Context()
	sts, err := f.kube.AppsV1().StatefulSets("ns").Get(ctx, "vm", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, int32(1), *sts.Spec.Replicas)
	require.Equal(t, "vm-runner", sts.Spec.Template.Spec.ServiceAccountName)
	require.Equal(t, []metav1.OwnerReference{ownerReference(testVM(t, "vm"))}, sts.OwnerReferences)
	require.NotEmpty(t, sts.Annotations[render.AnnotationHash])
	require.Equal(t, FieldManager, sts.ManagedFields[0].Manager, "server-side applied as the operator")
	for _, get := range []func() (metav1.Object, error){
		func() (metav1.Object, error) {
			return f.kube.CoreV1().ConfigMaps("ns").Get(ctx, "vm", metav1.GetOptions{})
		},
		func() (metav1.Object, error) {
			return f.kube.CoreV1().Secrets("ns").Get(ctx, "vm-cloud-init", metav1.GetOptions{})
		},
		func() (metav1.Object, error) {
			return f.kube.CoreV1().Services("ns").Get(ctx, "vm", metav1.GetOptions{})
		},
	} {
		obj, err := get()
		require.NoError(t, err)
		require.Equal(t, types.UID("uid-vm"), obj.GetOwnerReferences()[0].UID, obj.GetName())
	}

	display, err := f.kube.CoreV1().Secrets("ns").Get(ctx, "vm-display-secret", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, render.DisplaySecretLabels("vm"), display.Labels)
	require.Equal(t, "now", display.StringData[vmpod.PasswordExpiryFile], "locked until a console sets a password")
	require.Len(t, display.StringData[vmpod.DisplayPasswordFile], 32, "24 random bytes, base64")

	st := f.status()
	require.Equal(t, int64(3), st.ObservedGeneration)
	require.Equal(t, "Starting", st.PrintableStatus)
	require.Equal(t, int32(1), st.TargetCPUs, "the defaults")
	require.Equal(t, "1Gi", st.TargetRAM)
	require.Equal(t, []string{
		"Running=False Starting: Waiting for the runner pod.",
		"Ready=False PodNotReady: The VM has no pod.",
		"RestartRequired=False UpToDate: The VM runs with its current spec.",
		"Failed=False NoFailure: ",
		"SpecWarnings=False NoWarnings: ",
		"Stalled=False NoFailure: ",
	}, conditions(st))
	for _, c := range st.Conditions {
		require.Equal(t, int64(3), c.ObservedGeneration, c.Type)
		require.False(t, c.LastTransitionTime.IsZero(), c.Type)
	}
	require.Equal(t, []string{
		"Normal Created Created ConfigMap vm, Secret vm-cloud-init, StatefulSet vm, Service vm, " +
			"Secret vm-display-secret (a random display password, expired: the display stays locked until a console sets one)",
		"Normal Starting Waiting for the runner pod.",
	}, f.recorded())

	// Before the informers show the writes, a second reconcile finds
	// them in the write cache: nothing is written twice.
	f.kube.ClearActions()
	f.dyn.ClearActions()
	_, err = f.run(c, "vm")
	require.NoError(t, err)
	require.Empty(t, f.actions())
	require.Empty(t, f.recorded())
}

// TestReconcileResyncWritesNothing: once the informers show what the
// operator wrote, a resync writes nothing and tells nothing.
func TestReconcileResyncWritesNothing(t *testing.T) {
	f := newFixture(t)
	vm := newVM("vm", map[string]any{"state": "Running"})
	f.addVM(vm)
	c := f.newController()
	_, err := f.run(c, "vm")
	require.NoError(t, err)
	f.recorded()

	// A new controller whose caches hold what the first one wrote.
	ctx := t.Context()
	g := newFixture(t)
	written, err := f.dyn.Resource(v1.GroupVersionResource).Namespace("ns").Get(ctx, "vm", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, written.Object["status"], "the fake kept the status")
	g.addVM(written)
	sts, err := f.kube.AppsV1().StatefulSets("ns").Get(ctx, "vm", metav1.GetOptions{})
	require.NoError(t, err)
	cm, err := f.kube.CoreV1().ConfigMaps("ns").Get(ctx, "vm", metav1.GetOptions{})
	require.NoError(t, err)
	display, err := f.kube.CoreV1().Secrets("ns").Get(ctx, "vm-display-secret", metav1.GetOptions{})
	require.NoError(t, err)
	g.addCached(sts, cm, display)
	c = g.newController()

	requeue, err := g.run(c, "vm")
	require.NoError(t, err)
	require.Equal(t, pendingRecheck, requeue)
	// Only a read: without a pod, it looks for the StatefulSet's
	// FailedCreate events.
	require.Equal(t, []string{"list events"}, g.actions())
	require.Empty(t, g.recorded())
}

// TestReconcileRendersAgainOnChange: what the operator remembers of a
// VM's last render (to spare a resync the render) never hides a change:
// an object changed in the cluster, or a new annotation, which changes
// the render but not the VM's generation, is written again.
func TestReconcileRendersAgainOnChange(t *testing.T) {
	f := newFixture(t)
	vm := newVM("vm", map[string]any{"state": "Stopped"})
	objs := f.rendered(vm)
	f.addCached(objs.StatefulSet, objs.ConfigMap)
	f.addVM(vm)
	c := f.newController()
	_, err := f.run(c, "vm")
	require.NoError(t, err)
	require.Equal(t, []string{"patch vms/status vm"}, f.actions(), "the objects were in place")

	f.kube.ClearActions()
	f.dyn.ClearActions()
	changed := objs.StatefulSet.DeepCopy()
	changed.Annotations[render.AnnotationHash] = "changed-by-someone"
	f.store(c, changed)
	_, err = f.run(c, "vm")
	require.NoError(t, err)
	require.Equal(t, []string{"patch statefulsets vm"}, f.actions())

	// Once the cache shows the write, all is in place again.
	written, err := f.kube.AppsV1().StatefulSets("ns").Get(t.Context(), "vm", metav1.GetOptions{})
	require.NoError(t, err)
	f.store(c, written)
	f.kube.ClearActions()
	f.dyn.ClearActions()
	_, err = f.run(c, "vm")
	require.NoError(t, err)
	require.Empty(t, f.actions())

	waits := vm.DeepCopy()
	waits.SetAnnotations(map[string]string{v1.AnnotationDrain: v1.DrainWait})
	f.store(c, waits)
	_, err = f.run(c, "vm")
	require.NoError(t, err)
	require.Contains(t, f.actions(), "patch poddisruptionbudgets vm")
}

func TestReconcileStoppedVMScalesToZero(t *testing.T) {
	f := newFixture(t)
	running := f.rendered(newVM("vm", map[string]any{"state": "Running"}))
	f.addCached(running.StatefulSet, running.ConfigMap)
	f.addVM(newVM("vm", map[string]any{"state": "Stopped"}))
	c := f.newController()

	requeue, err := f.run(c, "vm")
	require.NoError(t, err)
	require.Zero(t, requeue)
	// The ConfigMap does not change; no display Secret for a VM that
	// does not run.
	require.Equal(t, []string{"patch statefulsets vm", "patch vms/status vm"}, f.actions())
	sts, err := f.kube.AppsV1().StatefulSets("ns").Get(t.Context(), "vm", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, int32(0), *sts.Spec.Replicas)
	require.Equal(t, "Running=False Stopped: The VM is stopped.", conditions(f.status())[0])
	require.Equal(t, "Ready=True Stopped: The VM is stopped, as its spec says.", conditions(f.status())[1])
	require.Equal(t, kstatus.CurrentStatus, kstatusOf(t, f.status()), "a VM stopped as asked is done for Flux")
	require.Equal(t, []string{"Normal Updated Updated StatefulSet vm", "Normal Stopped The VM is stopped."}, f.recorded())
}

// TestReconcileDeletesWhatIsNoLongerRendered: a Service the VM no longer
// asks for goes; one it does not own stays.
func TestReconcileDeletesWhatIsNoLongerRendered(t *testing.T) {
	f := newFixture(t)
	withLB := newVM("vm", map[string]any{"state": "Stopped"})
	withLB.Object["spec"].(map[string]any)["loadBalancerService"] = map[string]any{}
	objs := f.rendered(withLB)
	objs.Service.UID = "uid-service"
	f.addCached(objs.StatefulSet, objs.ConfigMap, objs.Service)
	f.addVM(newVM("vm", map[string]any{"state": "Stopped"}))
	c := f.newController()

	_, err := f.run(c, "vm")
	require.NoError(t, err)
	require.Contains(t, f.actions(), "delete services vm")
	_, err = f.kube.CoreV1().Services("ns").Get(t.Context(), "vm", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "%v", err)
	require.Contains(t, f.recorded(), "Normal Deleted Deleted Service vm")
}

// TestReconcileDrainWait: the drain annotation makes the operator apply
// the VM's PodDisruptionBudget, and its removal delete it.
func TestReconcileDrainWait(t *testing.T) {
	f := newFixture(t)
	waits := newVM("vm", map[string]any{"state": "Running"})
	waits.SetAnnotations(map[string]string{v1.AnnotationDrain: v1.DrainWait})
	f.addVM(waits)
	c := f.newController()
	_, err := f.run(c, "vm")
	require.NoError(t, err)
	require.Contains(t, f.actions(), "patch poddisruptionbudgets vm")
	pdb, err := f.kube.PolicyV1().PodDisruptionBudgets("ns").Get(t.Context(), "vm", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "vm", pdb.OwnerReferences[0].Name)

	f = newFixture(t)
	objs := f.rendered(waits)
	objs.DisruptionBudget.UID = "uid-pdb"
	f.addCached(objs.StatefulSet, objs.ConfigMap, objs.DisruptionBudget)
	f.addVM(newVM("vm", map[string]any{"state": "Running"}))
	c = f.newController()
	_, err = f.run(c, "vm")
	require.NoError(t, err)
	require.Contains(t, f.actions(), "delete poddisruptionbudgets vm")
	require.Contains(t, f.recorded(), "Normal Deleted Deleted PodDisruptionBudget vm")
}

func TestReconcileDeletedVM(t *testing.T) {
	t.Run("gone: nothing written, its writes forgotten", func(t *testing.T) {
		f := newFixture(t)
		c := f.newController()
		cm := writeKey{kind: "ConfigMap", namespace: "ns", name: "vm"}
		display := writeKey{kind: "Secret", namespace: "ns", name: render.DisplaySecretName("vm")}
		other := writeKey{kind: "ConfigMap", namespace: "ns", name: "other"}
		for _, k := range []writeKey{cm, display, other} {
			c.written.remember(k, "h", &metav1.ObjectMeta{ResourceVersion: "9"})
		}

		requeue, err := f.run(c, "vm")
		require.NoError(t, err)
		require.Zero(t, requeue)
		require.Empty(t, f.actions())
		require.False(t, c.written.covers(cm, "h", nil), "the VM's objects are forgotten")
		require.False(t, c.written.covers(display, "h", nil))
		require.True(t, c.written.covers(other, "h", nil), "another VM's stay")
	})

	t.Run("being deleted: left to the garbage collector", func(t *testing.T) {
		f := newFixture(t)
		vm := newVM("vm", map[string]any{"state": "Running"})
		vm.SetDeletionTimestamp(&metav1.Time{Time: time.Unix(1, 0)})
		vm.SetFinalizers([]string{"example.com/keep"})
		f.addVM(vm)
		c := f.newController()
		_, err := f.run(c, "vm")
		require.NoError(t, err)
		require.Empty(t, f.actions())
		require.Empty(t, f.recorded())
	})
}

func TestReconcileInvalidVM(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vm    map[string]any
		field string
		want  []string
	}{{
		name:  "fails validation",
		vm:    map[string]any{"state": "Stopped", "maximumCpus": int64(2), "currentCpus": int64(4)},
		field: "spec.vm.currentCpus",
	}, {
		name:  "unknown field",
		vm:    map[string]any{"state": "Stopped", "cpuz": int64(2)},
		field: "cpuz",
	}, {
		// Not even a display Secret is made for it.
		name:  "running",
		vm:    map[string]any{"state": "Running", "maximumCpus": int64(2), "currentCpus": int64(4)},
		field: "spec.vm.currentCpus",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.addVM(newVM("vm", tc.vm))
			c := f.newController()

			requeue, err := f.run(c, "vm")
			require.NoError(t, err, "retrying does not mend a spec")
			require.Zero(t, requeue)
			require.Equal(t, append(tc.want, "patch vms/status vm"), f.actions(), "nothing rendered is applied")
			st := f.status()
			failed := condition(t, st, v1.ConditionFailed)
			require.Equal(t, metav1.ConditionTrue, failed.Status)
			require.Equal(t, v1.ReasonInvalidSpec, failed.Reason)
			require.Contains(t, failed.Message, tc.field)
			require.Equal(t, int64(3), st.ObservedGeneration)
			ev := f.recorded()
			require.Len(t, ev, 1)
			require.True(t, strings.HasPrefix(ev[0], "Warning InvalidSpec "), ev[0])
			require.Contains(t, ev[0], tc.field)
		})
	}
}

func TestReconcileApplyRefused(t *testing.T) {
	f := newFixture(t)
	f.addVM(newVM("vm", map[string]any{"state": "Stopped"}))
	c := f.newController()
	f.kube.PrependReactor("patch", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "vm", nil)
	})

	_, err := f.run(c, "vm")
	require.Error(t, err, "retried with backoff")
	require.True(t, apierrors.IsForbidden(err), "%v", err)
	require.Equal(t, []string{"patch configmaps vm", "patch statefulsets vm", "patch vms/status vm"}, f.actions())
	failed := condition(t, f.status(), v1.ConditionFailed)
	require.Equal(t, v1.ReasonApplyFailed, failed.Reason)
	require.Contains(t, failed.Message, "apply StatefulSet ns/vm")
	require.Contains(t, failed.Message, "forbidden")
	require.Contains(t, f.recorded(), "Warning ApplyFailed "+failed.Message)
}

// TestReconcileStatusFromPod: with its objects in place, a VM's status
// follows its pod.
func TestReconcileStatusFromPod(t *testing.T) {
	vm := newVM("vm", map[string]any{"state": "Running"})
	terminated := func(code int32, msg string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}}
	}
	readyOnN1 := func(p *corev1.Pod) {
		p.Spec.NodeName = "n1"
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	for _, tc := range []struct {
		name    string
		pod     func(*corev1.Pod)
		node    string
		running string
		ready   metav1.ConditionStatus
		failed  string
		// paused: the runner reports the guest paused, a condition the
		// operator does not write but sums up in printable.
		paused bool
		// printable is the STATUS column of kubectl get and list.
		printable string
		// kstatus is how Flux's health checks read the VM.
		kstatus kstatus.Status
	}{{
		name:      "pending",
		pod:       func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending },
		running:   "Running=False Starting: The runner pod is pending.",
		ready:     metav1.ConditionFalse,
		failed:    "Failed=False NoFailure: ",
		printable: "Starting",
		kstatus:   kstatus.InProgressStatus,
	}, {
		name:      "running and ready",
		pod:       readyOnN1,
		node:      "n1",
		running:   "Running=True Running: The runner pod runs on n1.",
		ready:     metav1.ConditionTrue,
		failed:    "Failed=False NoFailure: ",
		printable: "Running",
		kstatus:   kstatus.CurrentStatus,
	}, {
		name:      "paused by the runner",
		pod:       readyOnN1,
		node:      "n1",
		running:   "Running=True Running: The runner pod runs on n1.",
		ready:     metav1.ConditionTrue,
		failed:    "Failed=False NoFailure: ",
		paused:    true,
		printable: v1.ConditionPaused,
		kstatus:   kstatus.CurrentStatus,
	}, {
		name: "qemu refused",
		pod: func(p *corev1.Pod) {
			p.Spec.NodeName = "n1"
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: render.ContainerRunner, RestartCount: 2,
				State: terminated(runnerconfig.ExitQemuRefused, "qemu: no KVM"),
			}}
		},
		node:      "n1",
		running:   "Running=True Running: The runner pod runs on n1.",
		ready:     metav1.ConditionFalse,
		failed:    "Failed=True QemuFailed: qemu: no KVM (2 restarts).",
		printable: "QemuFailed",
		kstatus:   kstatus.FailedStatus,
	}, {
		name: "crash loop",
		pod: func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Spec.NodeName = "n1"
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: render.ContainerRunner, RestartCount: 3,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
				LastTerminationState: terminated(runnerconfig.ExitCrashed, "qemu ended"),
			}}
		},
		node:      "n1",
		running:   "Running=True Running: The runner pod runs on n1.",
		ready:     metav1.ConditionFalse,
		failed:    "Failed=True RunnerCrashLoop: The runner failed 3 times; last exit code 4: qemu ended.",
		printable: "RunnerCrashLoop",
		kstatus:   kstatus.FailedStatus,
	}, {
		name: "no node agent",
		pod: func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/1 nodes are available: 1 Insufficient devices.vmop.io/vm."}}
		},
		running: "Running=False Starting: The runner pod is pending.",
		ready:   metav1.ConditionFalse,
		failed: "Failed=True NodeAgentMissing: No node offers the VM's pod devices.vmop.io/vm, the devices of vmop's node agent " +
			"(the scheduler: 0/1 nodes are available: 1 Insufficient devices.vmop.io/vm.). Install the node agent with kubectl vm install " +
			"(kubectl vm install --node-agent-only where no operator runs, e.g. GitOps), and check that its DaemonSet vm-node " +
			"in namespace vmop-system is ready on the VM's node: kubectl get daemonset -n vmop-system vm-node",
		printable: "NodeAgentMissing",
		kstatus:   kstatus.FailedStatus,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			objs := f.rendered(vm)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Name: render.PodName("vm"), Namespace: "ns", Labels: render.Labels("vm"),
				Annotations: map[string]string{
					render.AnnotationRestartHash: objs.StatefulSet.Spec.Template.Annotations[render.AnnotationRestartHash],
				},
			}}
			tc.pod(pod)
			display := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
				Name: render.DisplaySecretName("vm"), Namespace: "ns", Labels: render.DisplaySecretLabels("vm"),
			}}
			f.addCached(objs.StatefulSet, objs.ConfigMap, display, pod)
			v := vm
			if tc.paused {
				v = vm.DeepCopy()
				v.Object["status"] = map[string]any{"conditions": []any{map[string]any{
					"type": v1.ConditionPaused, "status": "True", "reason": "IOError", "message": "disk full",
					"lastTransitionTime": "2026-01-01T00:00:00Z",
				}}}
			}
			f.addVM(v)
			c := f.newController()

			requeue, err := f.run(c, "vm")
			require.NoError(t, err)
			require.Zero(t, requeue, "the pod's changes enqueue the VM")
			require.Equal(t, []string{"patch vms/status vm"}, f.actions(), "the objects are up to date")
			st := f.status()
			require.Equal(t, tc.node, st.Node)
			require.Equal(t, tc.running, conditions(st)[0])
			require.Equal(t, tc.ready, condition(t, st, v1.ConditionReady).Status)
			require.Equal(t, tc.failed, conditions(st)[3])
			require.Equal(t, metav1.ConditionFalse, condition(t, st, v1.ConditionRestartRequired).Status)
			require.Equal(t, tc.kstatus, kstatusOf(t, st))
			require.Equal(t, tc.printable, st.PrintableStatus)
			require.Nil(t, findCondition(st.Conditions, v1.ConditionPaused), "the runner's condition stays the runner's")
			if failed := condition(t, st, v1.ConditionFailed); failed.Status == metav1.ConditionTrue {
				require.Contains(t, f.recorded(), "Warning "+failed.Reason+" "+failed.Message, "a failure is an event on the VM")
			}
		})
	}

	t.Run("pod not created", func(t *testing.T) {
		f := newFixture(t)
		objs := f.rendered(vm)
		objs.StatefulSet.UID = "uid-sts"
		display := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name: render.DisplaySecretName("vm"), Namespace: "ns", Labels: render.DisplaySecretLabels("vm"),
		}}
		f.addCached(objs.StatefulSet, objs.ConfigMap, display)
		f.kubeObjects = append(f.kubeObjects, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "vm.1", Namespace: "ns"},
			InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", Name: "vm", UID: "uid-sts"},
			Reason:         "FailedCreate",
			Message:        `pods "vm-0" is forbidden: exceeded quota`,
			LastTimestamp:  metav1.Now(),
		})
		f.addVM(vm)
		c := f.newController()

		requeue, err := f.run(c, "vm")
		require.NoError(t, err)
		require.Equal(t, pendingRecheck, requeue)
		require.Equal(t, []string{"list events", "patch vms/status vm"}, f.actions())
		failed := condition(t, f.status(), v1.ConditionFailed)
		require.Equal(t, v1.ReasonPodCreateFailed, failed.Reason)
		require.Equal(t, `pods "vm-0" is forbidden: exceeded quota`, failed.Message)
		assert.Contains(t, f.recorded(), `Warning PodCreateFailed pods "vm-0" is forbidden: exceeded quota`)
	})
}

// TestRunStoppedWhileStarting: a stop (SIGTERM) before the caches have
// synced is a clean stop, not an error (the operator's exit code).
func TestRunStoppedWhileStarting(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, c.Run(ctx, 1))
}
