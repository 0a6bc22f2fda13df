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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
)

// pendingRecheck is how soon a VM that waits for its pod is looked at
// again, to notice a pod that cannot be created (no event tells).
const pendingRecheck = 10 * time.Second

// opStatus is the part of the status the operator writes.
type opStatus struct {
	ObservedGeneration int64              `json:"observedGeneration"`
	Node               string             `json:"node,omitempty"`
	Conditions         []metav1.Condition `json:"conditions"`
}

// observe derives the status from the StatefulSet and pod in the caches.
func (c *Controller) observe(ctx context.Context, vm *v1.VirtualMachine, objs *render.Objects) (opStatus, time.Duration, error) {
	s := c.scopeOf(vm.Namespace)
	sts, err := s.statefulSets.StatefulSets(vm.Namespace).Get(vm.Name)
	if isNotFound(err) {
		sts, err = nil, nil
	}
	if err != nil {
		return opStatus{}, 0, err
	}
	pod, err := s.pods.Pods(vm.Namespace).Get(vm.Name + "-0")
	if isNotFound(err) {
		pod, err = nil, nil
	}
	if err != nil {
		return opStatus{}, 0, err
	}
	want := vm.Spec.VM.State == v1.StateRunning
	st := opStatus{ObservedGeneration: vm.Generation}
	var requeue time.Duration

	running := cond(v1.ConditionRunning, false, v1.ReasonStopped, "The VM is stopped.")
	ready := cond(v1.ConditionReady, false, v1.ReasonPodNotReady, "The VM has no pod.")
	restart := cond(v1.ConditionRestartRequired, false, v1.ReasonUpToDate, "The VM runs with its current spec.")
	failed := cond(v1.ConditionFailed, false, v1.ReasonNoFailure, "")
	if pod != nil {
		st.Node = pod.Spec.NodeName
		switch {
		case pod.DeletionTimestamp != nil:
			running = cond(v1.ConditionRunning, pod.Status.Phase == corev1.PodRunning, v1.ReasonStopping, "The guest is shutting down.")
		case pod.Status.Phase == corev1.PodRunning:
			running = cond(v1.ConditionRunning, true, v1.ReasonRunning, "The runner pod runs on "+pod.Spec.NodeName+".")
		case !want:
			running = cond(v1.ConditionRunning, false, v1.ReasonStopping, "The pod is ending.")
		default:
			running = cond(v1.ConditionRunning, false, v1.ReasonStarting, "The runner pod is "+strings.ToLower(string(pod.Status.Phase))+".")
		}
		if podReady(pod) {
			ready = cond(v1.ConditionReady, true, v1.ReasonPodReady, "The runner reports the VM ready.")
		} else {
			ready.Message = "The runner pod is not ready."
		}
		if have, wantHash := pod.Annotations[render.AnnotationRestartHash], objs.StatefulSet.Spec.Template.Annotations[render.AnnotationRestartHash]; have != wantHash {
			restart = cond(v1.ConditionRestartRequired, true, v1.ReasonRestartPending,
				"The spec changed in a way that applies only when the VM starts (e.g. maximumRam, disks, firmware); stop and start the VM to apply it.")
		}
		if f, ok := podFailure(pod); ok {
			failed = f
		}
	} else if want {
		running = cond(v1.ConditionRunning, false, v1.ReasonStarting, "Waiting for the runner pod.")
		requeue = pendingRecheck
		if sts != nil {
			f, ok, err := c.createFailure(ctx, sts)
			if err != nil {
				return opStatus{}, 0, err
			}
			if ok {
				failed = f
			}
		}
	}
	st.Conditions = []metav1.Condition{running, ready, restart, failed}
	for i := range st.Conditions {
		st.Conditions[i].ObservedGeneration = vm.Generation
	}
	return st, requeue, nil
}

func cond(typ string, on bool, reason, msg string) metav1.Condition {
	s := metav1.ConditionFalse
	if on {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFailure reports a runner that keeps failing, with what it said last
// (the pod's termination message falls back to the end of its log), or a
// pod that no node can take.
func podFailure(pod *corev1.Pod) (metav1.Condition, bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != render.ContainerRunner || cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" {
			continue
		}
		msg := fmt.Sprintf("The runner failed %d times", cs.RestartCount)
		if t := cs.LastTerminationState.Terminated; t != nil {
			msg += fmt.Sprintf("; last exit code %d", t.ExitCode)
			if m := strings.TrimSpace(t.Message); m != "" {
				msg += ": " + m
			}
		}
		return cond(v1.ConditionFailed, true, v1.ReasonCrashLoop, msg+"."), true
	}
	for _, pc := range pod.Status.Conditions {
		if pc.Type == corev1.PodScheduled && pc.Status == corev1.ConditionFalse && pc.Reason == corev1.PodReasonUnschedulable {
			return cond(v1.ConditionFailed, true, v1.ReasonUnschedulable, pc.Message), true
		}
	}
	return metav1.Condition{}, false
}

// createFailure looks for the StatefulSet controller's FailedCreate event:
// a pod that cannot be created (admission, quota, a missing account)
// leaves no other trace.
func (c *Controller) createFailure(ctx context.Context, sts *appsv1.StatefulSet) (metav1.Condition, bool, error) {
	sel := fields.Set{"involvedObject.uid": string(sts.UID), "reason": "FailedCreate"}.String()
	list, err := c.kube.CoreV1().Events(sts.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return metav1.Condition{}, false, fmt.Errorf("events of statefulset %s/%s: %w", sts.Namespace, sts.Name, err)
	}
	var latest *corev1.Event
	for i := range list.Items {
		if e := &list.Items[i]; latest == nil || eventTime(e).After(eventTime(latest)) {
			latest = e
		}
	}
	if latest == nil {
		return metav1.Condition{}, false, nil
	}
	return cond(v1.ConditionFailed, true, v1.ReasonPodCreateFailed, latest.Message), true, nil
}

func eventTime(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if e.EventTime.After(t) {
		t = e.EventTime.Time
	}
	return t
}

// invalidStatus is the status of a VM whose spec cannot be rendered.
func invalidStatus(u *unstructured.Unstructured, err error) opStatus {
	f := cond(v1.ConditionFailed, true, v1.ReasonInvalidSpec, err.Error())
	f.ObservedGeneration = u.GetGeneration()
	return opStatus{ObservedGeneration: u.GetGeneration(), Conditions: []metav1.Condition{f}}
}

// writeStatus applies st as the operator's part of the status unless the
// VM already has it; a condition keeps its lastTransitionTime unless its
// status flips.
func (c *Controller) writeStatus(ctx context.Context, u *unstructured.Unstructured, st opStatus) error {
	current, err := currentStatus(u)
	if err != nil {
		return err
	}
	key := writeKey{kind: "status", namespace: u.GetNamespace(), name: u.GetName()}
	hash, err := statusHash(st)
	if err != nil {
		return err
	}
	if same(current, st) || c.written.covers(key, hash, u) {
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
		"metadata":   map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
		"status":     status,
	})
	if err != nil {
		return err
	}
	res, err := c.vms.Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true), FieldValidation: fieldValidation}, "status")
	if err != nil {
		return fmt.Errorf("status of %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	c.metrics.write("status")
	c.written.remember(key, hash, res)
	return nil
}

// currentStatus is the operator's part of the VM's status.
func currentStatus(u *unstructured.Unstructured) (opStatus, error) {
	var st opStatus
	raw, ok := u.Object["status"].(map[string]any)
	if !ok {
		return st, nil
	}
	var full v1.VirtualMachineStatus
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &full); err != nil {
		return st, fmt.Errorf("status of %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	st.ObservedGeneration, st.Node = full.ObservedGeneration, full.Node
	for _, cd := range full.Conditions {
		if slices.Contains([]string{v1.ConditionRunning, v1.ConditionReady, v1.ConditionRestartRequired, v1.ConditionFailed}, cd.Type) {
			st.Conditions = append(st.Conditions, cd)
		}
	}
	return st, nil
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
