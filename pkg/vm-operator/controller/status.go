package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/vmstatus"
)

// pendingRecheck is how soon a VM that waits for its pod is looked at
// again, to notice a pod that cannot be created (no event tells).
const pendingRecheck = 10 * time.Second

// opStatus is the part of the status the operator writes.
type opStatus struct {
	ObservedGeneration int64              `json:"observedGeneration"`
	Node               string             `json:"node,omitempty"`
	Conditions         []metav1.Condition `json:"conditions"`
	// PrintableStatus sums up the conditions, the runner's Paused too:
	// set by writeStatus.
	PrintableStatus string `json:"printableStatus,omitempty"`
	TargetCPUs      int32  `json:"targetCpus,omitempty"`
	TargetRAM       string `json:"targetRam,omitempty"`
}

// observe derives the status from the StatefulSet and pod in the caches.
func (c *Controller) observe(ctx context.Context, vm *v1.VirtualMachine, out *rendered) (opStatus, time.Duration, error) {
	s := c.scopeOf(vm.Namespace)
	sts, err := s.statefulSets.StatefulSets(vm.Namespace).Get(vm.Name)
	if apierrors.IsNotFound(err) {
		sts, err = nil, nil
	}
	if err != nil {
		return opStatus{}, 0, err
	}
	pod, err := s.pods.Pods(vm.Namespace).Get(render.PodName(vm.Name))
	if apierrors.IsNotFound(err) {
		pod, err = nil, nil
	}
	if err != nil {
		return opStatus{}, 0, err
	}
	want := vm.Spec.VM.State == v1.StateRunning
	st := opStatus{ObservedGeneration: vm.Generation}
	cpus, ram := vm.Spec.VM.Sizes()
	st.TargetCPUs, st.TargetRAM = cpus, v1.FormatBytes(ram.Bytes())
	if pod != nil {
		st.Node = pod.Spec.NodeName
	}
	conds := vmstatus.FromPod(pod, want, out.restartHash)
	// Read only while the scheduler waits for claims: not cached.
	claims, err := vmstatus.Claims(ctx, c.kube, pod)
	if err != nil {
		return opStatus{}, 0, err
	}
	conds.ExplainClaims(claims)
	var requeue time.Duration
	if pod == nil && want {
		// No event tells of a pod that cannot be created: look again.
		requeue = pendingRecheck
		if sts != nil {
			f, ok, err := c.createFailure(ctx, sts)
			if err != nil {
				return opStatus{}, 0, err
			}
			if ok {
				conds.Failed = f
			}
		}
	}
	st.Conditions = append(conds.List(), warningsCondition(out.warnings))
	for i := range st.Conditions {
		st.Conditions[i].ObservedGeneration = vm.Generation
	}
	return st, requeue, nil
}

// setFailed replaces the Failed condition: a failure the operator meets
// itself is more to the point than what the pod shows.
func (st *opStatus) setFailed(f metav1.Condition) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == v1.ConditionFailed {
			f.ObservedGeneration = st.Conditions[i].ObservedGeneration
			st.Conditions[i] = f
			return
		}
	}
	st.Conditions = append(st.Conditions, f)
}

// warningsCondition keeps render's warnings in the status, where users of
// the operator look, not only in kubectl vm render's output.
func warningsCondition(w []string) metav1.Condition {
	if len(w) == 0 {
		return vmstatus.Condition(v1.ConditionSpecWarnings, false, v1.ReasonNoWarnings, "")
	}
	return vmstatus.Condition(v1.ConditionSpecWarnings, true, v1.ReasonWarnings, strings.Join(w, "; ")+".")
}

// createFailure looks for the StatefulSet controller's FailedCreate event:
// a pod that cannot be created (admission, quota, a missing account)
// leaves no other trace.
func (c *Controller) createFailure(ctx context.Context, sts *appsv1.StatefulSet) (metav1.Condition, bool, error) {
	sel := fields.Set{"involvedObject.uid": string(sts.UID), "reason": vmstatus.EventFailedCreate}.String()
	list, err := c.kube.CoreV1().Events(sts.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return metav1.Condition{}, false, fmt.Errorf("events of statefulset %s/%s: %w", sts.Namespace, sts.Name, err)
	}
	f, ok := vmstatus.CreateFailed(list.Items)
	return f, ok, nil
}

// withStalled adds to cs (or replaces in it) the Stalled condition, a copy
// of Failed under kstatus's name.
func withStalled(cs []metav1.Condition) []metav1.Condition {
	f := findCondition(cs, v1.ConditionFailed)
	if f == nil {
		return cs
	}
	stalled := *f
	stalled.Type = v1.ConditionStalled
	cs = slices.DeleteFunc(slices.Clone(cs), func(c metav1.Condition) bool { return c.Type == v1.ConditionStalled })
	return append(cs, stalled)
}

// invalidStatus is the status of a VM whose spec cannot be rendered.
func invalidStatus(vm metav1.Object, err error) opStatus {
	return failedStatus(vm, v1.ReasonInvalidSpec, err.Error())
}

// failedStatus is the status of a VM the operator applies nothing of.
func failedStatus(vm metav1.Object, reason, msg string) opStatus {
	f := vmstatus.Condition(v1.ConditionFailed, true, reason, msg)
	f.ObservedGeneration = vm.GetGeneration()
	return opStatus{ObservedGeneration: vm.GetGeneration(), Conditions: []metav1.Condition{f}}
}

// writeStatus applies st as the operator's part of the status unless the
// VM already has it; a condition keeps its lastTransitionTime unless its
// status flips.
func (c *Controller) writeStatus(ctx context.Context, vm vmObject, st opStatus) error {
	full, err := vmStatus(vm)
	if err != nil {
		return err
	}
	current := operatorPart(full)
	st.Conditions = withStalled(st.Conditions)
	conds := st.Conditions
	if p := findCondition(full.Conditions, v1.ConditionPaused); p != nil {
		conds = append(slices.Clone(conds), *p)
	}
	st.PrintableStatus, _ = vmstatus.Phase(conds)
	key := statusKey(vm.GetNamespace(), vm.GetName())
	hash, err := statusHash(st)
	if err != nil {
		return err
	}
	if same(current, st) || c.written.covers(key, hash, vm) {
		return nil
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for i := range st.Conditions {
		cd := &st.Conditions[i]
		cd.LastTransitionTime = now
		if old := findCondition(current.Conditions, cd.Type); old != nil && old.Status == cd.Status && !old.LastTransitionTime.IsZero() {
			cd.LastTransitionTime = old.LastTransitionTime
		}
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": v1.APIVersion,
		"kind":       v1.Kind,
		"metadata":   map[string]any{"name": vm.GetName(), "namespace": vm.GetNamespace()},
		"status":     status,
	})
	if err != nil {
		return err
	}
	res, err := c.vms.Namespace(vm.GetNamespace()).Patch(ctx, vm.GetName(), types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true), FieldValidation: fieldValidation}, "status")
	if err != nil {
		err = fmt.Errorf("status of %s/%s: %w", vm.GetNamespace(), vm.GetName(), err)
		c.events.Eventf(vm, nil, corev1.EventTypeWarning, EventStatusFailed, "WriteStatus", "%v", err)
		return err
	}
	c.metrics.write("status")
	c.written.remember(key, hash, res)
	c.recordTransitions(vm, c.reported.since(key, vm, current), st)
	c.reported.remember(key, res, st)
	return nil
}

func statusKey(namespace, name string) writeKey {
	return writeKey{kind: "status", namespace: namespace, name: name}
}

// vmObject is a VirtualMachine as the cache holds it: a
// *v1.VirtualMachine, or unstructured if it does not decode.
type vmObject interface {
	metav1.Object
	runtime.Object
}

// vmStatus is the VM's status as the cache holds it.
func vmStatus(obj vmObject) (v1.VirtualMachineStatus, error) {
	var full v1.VirtualMachineStatus
	switch o := obj.(type) {
	case *v1.VirtualMachine:
		full = o.Status
	case *unstructured.Unstructured:
		raw, ok := o.Object["status"].(map[string]any)
		if !ok {
			return full, nil
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &full); err != nil {
			return full, fmt.Errorf("status of %s/%s: %w", o.GetNamespace(), o.GetName(), err)
		}
	default:
		return full, fmt.Errorf("unexpected object %T in the VM cache", obj)
	}
	return full, nil
}

// operatorPart is the operator's part of a VM's status.
func operatorPart(full v1.VirtualMachineStatus) opStatus {
	st := opStatus{ObservedGeneration: full.ObservedGeneration, Node: full.Node,
		PrintableStatus: full.PrintableStatus, TargetCPUs: full.TargetCPUs, TargetRAM: full.TargetRAM}
	for _, cd := range full.Conditions {
		if slices.Contains([]string{v1.ConditionRunning, v1.ConditionReady, v1.ConditionRestartRequired, v1.ConditionFailed, v1.ConditionSpecWarnings, v1.ConditionStalled}, cd.Type) {
			st.Conditions = append(st.Conditions, cd)
		}
	}
	return st
}

// same compares statuses without the transition times.
func same(a, b opStatus) bool {
	ha, errA := statusHash(a)
	hb, errB := statusHash(b)
	return errA == nil && errB == nil && ha == hb
}

// statusHash identifies a status without transition times, conditions in
// type order.
func statusHash(st opStatus) (string, error) {
	cs := slices.Clone(st.Conditions)
	for i := range cs {
		cs[i].LastTransitionTime = metav1.Time{}
	}
	slices.SortFunc(cs, func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
	st.Conditions = cs
	b, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
