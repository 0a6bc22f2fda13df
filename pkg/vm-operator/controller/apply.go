package controller

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
)

// applyObjects writes each rendered object whose render hash or owner
// differs from the cluster's. It returns the resourceVersion of the last
// object written that the pod's config volume projects (the ConfigMap or
// the cloud-init Secret), "" when it wrote none, for syncPod; on an error
// too, since what was written before it stays written.
func (c *Controller) applyObjects(ctx context.Context, vm *v1.VirtualMachine, objs *render.Objects, w *writes) (string, error) {
	owner := ownerReference(vm)
	var projected string
	for _, obj := range objs.List() {
		m, o := describe(obj)
		kind, hash := o.kind, o.hash
		key := writeKey{kind: kind, namespace: m.GetNamespace(), name: o.name}
		cached, done, err := c.applied(vm, key, hash)
		if err != nil {
			return projected, err
		}
		if done {
			continue
		}
		m.SetOwnerReferences([]metav1.OwnerReference{owner})
		body, err := json.Marshal(obj)
		if err != nil {
			return projected, fmt.Errorf("%s %s: %w", kind, m.GetName(), err)
		}
		res, err := c.patch(ctx, obj, body)
		if err != nil {
			return projected, fmt.Errorf("apply %s %s/%s: %w", kind, m.GetNamespace(), m.GetName(), err)
		}
		c.metrics.write(kind)
		c.written.remember(key, hash, res)
		if cached == nil {
			w.add(&w.created, kind, m.GetName())
		} else {
			w.add(&w.updated, kind, m.GetName())
		}
		klog.FromContext(ctx).V(2).Info("Applied", "kind", kind, "name", m.GetName(), "hash", hash)
		switch obj.(type) {
		case *corev1.ConfigMap, *corev1.Secret:
			projected = res.GetResourceVersion()
		}
	}
	return projected, nil
}

// applied tells whether the object of key is in the cluster as rendered
// (its hash) and owned by vm, or the operator wrote it so and the cache
// does not show it yet. It also returns the cached object, nil if none.
func (c *Controller) applied(vm *v1.VirtualMachine, key writeKey, hash string) (metav1.Object, bool, error) {
	cached, err := c.cached(key.kind, key.namespace, key.name)
	if err != nil {
		return nil, false, err
	}
	if cached != nil && cached.GetAnnotations()[render.AnnotationHash] == hash && ownedBy(cached, vm.UID) {
		return cached, true, nil
	}
	return cached, c.written.covers(key, hash, cached), nil
}

// inPlace tells whether every object of vm's render out is applied.
func (c *Controller) inPlace(vm *v1.VirtualMachine, out *rendered) bool {
	for _, o := range out.objects {
		if _, done, err := c.applied(vm, writeKey{kind: o.kind, namespace: vm.Namespace, name: o.name}, o.hash); err != nil || !done {
			return false
		}
	}
	return true
}

// cached returns the informer's copy of a rendered object, nil if none.
func (c *Controller) cached(kind, ns, name string) (metav1.Object, error) {
	s := c.scopeOf(ns)
	var (
		obj metav1.Object
		err error
	)
	switch kind {
	case "StatefulSet":
		obj, err = nilIfAbsent(s.statefulSets.StatefulSets(ns).Get(name))
	case "ConfigMap":
		obj, err = nilIfAbsent(s.configMaps.ConfigMaps(ns).Get(name))
	case "Secret":
		obj, err = nilIfAbsent(s.secrets.Secrets(ns).Get(name))
	case "Service":
		obj, err = nilIfAbsent(s.services.Services(ns).Get(name))
	case "PodDisruptionBudget":
		obj, err = nilIfAbsent(s.budgets.PodDisruptionBudgets(ns).Get(name))
	default:
		return nil, fmt.Errorf("no cache for kind %s", kind)
	}
	return obj, err
}

// nilIfAbsent turns a lister's (typed nil, not found) into a nil interface.
func nilIfAbsent[T any, P interface {
	*T
	metav1.Object
}](obj P, err error) (metav1.Object, error) {
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// fieldValidation: what the operator writes comes from Go types, so it
// cannot hold unknown fields, and the API server can skip looking for them.
const fieldValidation = metav1.FieldValidationIgnore

// patch server-side applies body as the operator.
func (c *Controller) patch(ctx context.Context, obj runtime.Object, body []byte) (metav1.Object, error) {
	m := obj.(metav1.Object)
	ns, name := m.GetNamespace(), m.GetName()
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true), FieldValidation: fieldValidation}
	switch obj.(type) {
	case *appsv1.StatefulSet:
		return c.kube.AppsV1().StatefulSets(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	case *corev1.ConfigMap:
		return c.kube.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	case *corev1.Secret:
		return c.kube.CoreV1().Secrets(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	case *corev1.Service:
		return c.kube.CoreV1().Services(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	case *policyv1.PodDisruptionBudget:
		return c.kube.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	}
	return nil, fmt.Errorf("cannot apply %T", obj)
}

// deleteStale removes the optional objects (cloud-init Secret, Service,
// PodDisruptionBudget) that the VM had but no longer renders. Only objects it owns are touched.
func (c *Controller) deleteStale(ctx context.Context, vm *v1.VirtualMachine, out *rendered, w *writes) error {
	ns := vm.Namespace
	type stale struct {
		kind, name string
		wanted     bool
		del        func(context.Context, string, metav1.DeleteOptions) error
	}
	for _, s := range []stale{
		{"Secret", render.CloudInitSecretName(vm.Name), out.secret, c.kube.CoreV1().Secrets(ns).Delete},
		{"Service", vm.Name, out.service, c.kube.CoreV1().Services(ns).Delete},
		{"PodDisruptionBudget", vm.Name, out.budget, c.kube.PolicyV1().PodDisruptionBudgets(ns).Delete},
	} {
		if s.wanted {
			continue
		}
		cached, err := c.cached(s.kind, ns, s.name)
		if err != nil || cached == nil || !ownedBy(cached, vm.UID) || cached.GetDeletionTimestamp() != nil {
			continue
		}
		uid := cached.GetUID()
		err = s.del(ctx, s.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete %s %s/%s: %w", s.kind, ns, s.name, err)
		}
		c.metrics.write(s.kind)
		w.add(&w.deleted, s.kind, s.name)
		klog.FromContext(ctx).Info("Deleted what the VM no longer needs", "kind", s.kind, "name", s.name)
	}
	return nil
}

// ownerReference makes the VM the controller of what it renders, so that
// the garbage collector removes the objects with the VM. The disks' PVCs
// come from the StatefulSet's claim templates and have no such reference.
func ownerReference(vm *v1.VirtualMachine) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         v1.APIVersion,
		Kind:               v1.Kind,
		Name:               vm.Name,
		UID:                vm.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	for _, r := range obj.GetOwnerReferences() {
		if r.UID == uid {
			return true
		}
	}
	return false
}
