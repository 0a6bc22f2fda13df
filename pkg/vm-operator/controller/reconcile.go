package controller

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/pkg/vmstatus"
)

// reconcile brings one VM's objects and status up to date. A positive
// duration asks to look again then (e.g. while a pod is expected).
func (c *Controller) reconcile(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	s := c.scopeOf(key.Namespace)
	obj, err := s.vms.ByNamespace(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		// The garbage collector removes what it owned.
		c.written.forgetVM(key.Namespace, key.Name, render.CloudInitSecretName(key.Name), render.DisplaySecretName(key.Name))
		c.reported.forget(statusKey(key.Namespace, key.Name))
		c.renders.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var vm *v1.VirtualMachine
	switch o := obj.(type) {
	case *v1.VirtualMachine:
		vm = o
	case *unstructured.Unstructured:
		// Kept undecoded by cacheVM: invalid.
		if o.GetDeletionTimestamp() != nil {
			return 0, nil
		}
		_, err := decodeVM(o)
		if err == nil {
			return 0, fmt.Errorf("virtualmachine %s in the cache was not decoded", key)
		}
		return 0, c.writeStatus(ctx, o, invalidStatus(o, err))
	default:
		return 0, fmt.Errorf("unexpected object %T in the VM cache", obj)
	}
	if vm.DeletionTimestamp != nil {
		return 0, nil
	}
	if msg, conflict := macConflict(s.vms, vm); conflict {
		// Nothing is applied, as for an invalid spec; checked again
		// later, as the other VM may go.
		st := failedStatus(vm, v1.ReasonMACConflict, msg)
		return macRecheck, c.writeStatus(ctx, vm, st)
	}

	opts := render.Options{ImageRegistry: c.cfg.ImageRegistry}
	if err := render.Validate(vm, opts); err != nil {
		// Nothing is written for an invalid VM, not even its runner's
		// account or display Secret: a half-valid spec must not reach the
		// pod.
		return 0, c.writeStatus(ctx, vm, invalidStatus(vm, err))
	}

	// A failed write does not end the reconcile: the VM's status must
	// tell of it, since users cannot read the operator's log.
	var w writes
	opts.ServiceAccount, err = c.ensureRunnerAccess(ctx, vm.Namespace)
	applyErr := err
	// The resourceVersion of what the pod's config volume projects, if
	// written now.
	var projected string
	var display *corev1.Secret
	if applyErr == nil {
		opts.DisplaySecret, display, applyErr = c.displaySecret(vm)
	}
	out := c.renders.get(vm, opts)
	if applyErr != nil || out == nil || !c.inPlace(vm, out) {
		objs, err := render.Render(vm, opts) // valid: checked above
		if err != nil {
			return 0, err
		}
		out = summarize(objs)
		if applyErr == nil {
			var written string
			written, applyErr = c.applyObjects(ctx, vm, objs, &w)
			if applyErr == nil {
				c.renders.put(vm, opts, out)
			}
			projected = cmp.Or(written, projected)
		}
	}
	if applyErr == nil && display != nil {
		var created string
		created, applyErr = c.createDisplaySecret(ctx, display, &w)
		projected = cmp.Or(created, projected)
	}
	// What the pod's config volume projects has changed: tell the
	// kubelet, also when a later write failed.
	c.syncPod(ctx, vm, projected)
	if applyErr == nil {
		applyErr = c.deleteStale(ctx, vm, out, &w)
	}
	w.record(c, vm)
	st, requeue, err := c.observe(ctx, vm, out)
	if err != nil {
		return 0, errors.Join(applyErr, err)
	}
	if applyErr != nil {
		// Retried with backoff (at most retryMax apart), so that the VM
		// recovers soon after whatever refused the write lets it by.
		msg := applyFailedMessage(applyErr)
		st.setFailed(vmstatus.Condition(v1.ConditionFailed, true, v1.ReasonApplyFailed, msg))
		if err := c.writeStatus(ctx, vm, st); err != nil {
			// The status cannot tell of it: an event must.
			c.events.Eventf(vm, nil, corev1.EventTypeWarning, v1.ReasonApplyFailed, "Apply", "%s", msg)
			return 0, errors.Join(applyErr, err)
		}
		return 0, applyErr
	}
	return requeue, c.writeStatus(ctx, vm, st)
}

// decodeVM converts the cached object strictly, as the plugin decodes a
// manifest, so that both see the same VM.
func decodeVM(u *unstructured.Unstructured) (*v1.VirtualMachine, error) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	return v1.DecodeJSON(b)
}

// ensureRunnerAccess gives runner pods of namespace ns their service
// account and its role binding, and returns the account's name. It writes
// once per namespace and process: the objects are shared by all VMs of
// the namespace, and a user may have changed them (they are left alone).
// The name comes back with an error too, for the status's render.
func (c *Controller) ensureRunnerAccess(ctx context.Context, ns string) (string, error) {
	if c.cfg.RunnerAccess == nil {
		return "", nil
	}
	sa, rb := c.cfg.RunnerAccess(ns)
	if _, done := c.access.Load(ns); done {
		return sa.Name, nil
	}
	_, err := c.kube.CoreV1().ServiceAccounts(ns).Get(ctx, sa.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err = c.kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{FieldManager: FieldManager}); err == nil {
			c.metrics.write("ServiceAccount")
		}
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return sa.Name, fmt.Errorf("service account %s/%s of runner pods: %w", ns, sa.Name, err)
	}
	_, err = c.kube.RbacV1().RoleBindings(ns).Get(ctx, rb.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err = c.kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{FieldManager: FieldManager}); err == nil {
			c.metrics.write("RoleBinding")
		}
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return sa.Name, fmt.Errorf("role binding %s/%s of runner pods: %w", ns, rb.Name, err)
	}
	c.access.Store(ns, true)
	return sa.Name, nil
}

// displaySecret returns the name of the VM's display Secret, for
// rendering: one labelled for the VM (VM-Operator's convention) or the
// conventional name (""). Unless the VM says generateSecret: false, a VM
// with SPICE and no such Secret gets one with a random password that has
// expired, so the display stays locked until a console sets a new one:
// the second result, to create. That happens when the VM is to run: a
// stopped VM has no display, and a thousand stopped VMs need no thousand
// Secrets.
func (c *Controller) displaySecret(vm *v1.VirtualMachine) (string, *corev1.Secret, error) {
	name := render.DisplaySecretName(vm.Name)
	sel := labels.SelectorFromSet(labels.Set{
		vmpod.LabelInstance:  vm.Name,
		vmpod.LabelComponent: vmpod.ComponentDisplaySecret,
	})
	list, err := c.scopeOf(vm.Namespace).secrets.Secrets(vm.Namespace).List(sel)
	if err != nil {
		return "", nil, err
	}
	for _, s := range list {
		if s.Name == name {
			return "", nil, nil
		}
	}
	if len(list) > 0 {
		return list[0].Name, nil, nil
	}
	if vm.Spec.VM.State != v1.StateRunning {
		return "", nil, nil
	}
	// As rendered: a VM without a display section has the default SPICE
	// display, which must not be left open.
	defaulted := vm.DeepCopy()
	defaulted.Default()
	d := defaulted.Spec.VM.Display
	if d == nil || d.Spice == nil || (d.Spice.GenerateSecret != nil && !*d.Spice.GenerateSecret) {
		return "", nil, nil
	}
	if c.written.covers(writeKey{kind: "Secret", namespace: vm.Namespace, name: name}, "generated", nil) {
		return "", nil, nil
	}
	pw := make([]byte, 24)
	if _, err := rand.Read(pw); err != nil {
		return "", nil, err
	}
	return "", &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: vm.Namespace, Labels: render.DisplaySecretLabels(vm.Name),
			OwnerReferences: []metav1.OwnerReference{ownerReference(vm)},
		},
		Type: corev1.SecretTypeOpaque,
		StringData: map[string]string{
			vmpod.DisplayPasswordFile: base64.RawURLEncoding.EncodeToString(pw),
			vmpod.PasswordExpiryFile:  "now",
		},
	}, nil
}

// createDisplaySecret creates the Secret displaySecret generated and
// returns its resourceVersion, for syncPod. It comes after the
// StatefulSet, not before: a start reaches the StatefulSet one write
// sooner, and a runner that finds no password keeps its display locked
// until one comes.
func (c *Controller) createDisplaySecret(ctx context.Context, secret *corev1.Secret, w *writes) (string, error) {
	key := writeKey{kind: "Secret", namespace: secret.Namespace, name: secret.Name}
	res, err := c.kube.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{FieldManager: FieldManager, FieldValidation: fieldValidation})
	switch {
	case apierrors.IsAlreadyExists(err):
		// A Secret without the labels, made by the user: it is theirs.
		c.written.remember(key, "generated", &metav1.ObjectMeta{})
	case err != nil:
		return "", fmt.Errorf("display secret %s/%s: %w", secret.Namespace, secret.Name, err)
	default:
		c.metrics.write("Secret")
		c.written.remember(key, "generated", res)
		w.add(&w.created, "Secret", secret.Name+" (a random display password, expired: the display stays locked until a console sets one)")
		klog.FromContext(ctx).Info("Generated a display secret (locked until a console sets a password)", "secret", secret.Name)
		return res.ResourceVersion, nil
	}
	return "", nil
}
