package controller

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// Reasons of the operator's events on a VirtualMachine (kubectl events
// --for vm/NAME). A Failed condition's event has the condition's reason
// (InvalidSpec, ApplyFailed, PodCreateFailed, QemuFailed, ...).
const (
	// EventCreated and EventUpdated: the operator wrote objects the VM
	// renders to; a resync of an unchanged VM writes nothing and says
	// nothing.
	EventCreated = "Created"
	EventUpdated = "Updated"
	// EventDeleted: an object the VM no longer renders was removed.
	EventDeleted = "Deleted"
	// EventStarting, EventStarted, EventStopping, EventStopped follow the
	// Running condition.
	EventStarting = "Starting"
	EventStarted  = "Started"
	EventStopping = "Stopping"
	EventStopped  = "Stopped"
	// EventLiveChange: a changed spec was passed on to the running VM's
	// runner, which applies it without a restart.
	EventLiveChange = "LiveChange"
	// EventRestartRequired: the spec changed in a way that applies only
	// at the VM's next start.
	EventRestartRequired = "RestartRequired"
	// EventRecovered: the VM's Failed condition cleared.
	EventRecovered = "Recovered"
	// EventSpecWarnings: the spec asks for something it does not get as
	// written (see the SpecWarnings condition).
	EventSpecWarnings = "SpecWarnings"
	// EventStatusFailed: the operator could not write the VM's status.
	EventStatusFailed = "StatusFailed"
)

// phaseEvents maps the Running condition's reason to the event that
// tells of it.
var phaseEvents = map[string]string{
	v1.ReasonStarting: EventStarting,
	v1.ReasonRunning:  EventStarted,
	v1.ReasonStopping: EventStopping,
	v1.ReasonStopped:  EventStopped,
}

// recordTransitions tells as events what changed between the status the
// VM had and the one just written: events follow conditions, so that a
// resync that writes nothing records nothing, and a failure retried with
// backoff makes one event, not one per attempt.
func (c *Controller) recordTransitions(vm runtime.Object, before, after opStatus) {
	changed := func(typ string) (old, cur *metav1.Condition, ok bool) {
		old, cur = findCondition(before.Conditions, typ), findCondition(after.Conditions, typ)
		if cur == nil {
			return old, cur, false
		}
		return old, cur, old == nil || old.Status != cur.Status || old.Reason != cur.Reason || old.Message != cur.Message
	}
	if old, cur, ok := changed(v1.ConditionRunning); ok && (old == nil || old.Reason != cur.Reason) {
		if reason, known := phaseEvents[cur.Reason]; known {
			c.events.Eventf(vm, nil, corev1.EventTypeNormal, reason, reason, "%s", cur.Message)
		}
	}
	if old, cur, ok := changed(v1.ConditionRestartRequired); ok && cur.Status == metav1.ConditionTrue && (old == nil || old.Status != cur.Status) {
		c.events.Eventf(vm, nil, corev1.EventTypeNormal, EventRestartRequired, "Observe", "%s", cur.Message)
	}
	if old, cur, ok := changed(v1.ConditionFailed); ok {
		switch {
		case cur.Status == metav1.ConditionTrue:
			c.events.Eventf(vm, nil, corev1.EventTypeWarning, cur.Reason, "Observe", "%s", cur.Message)
		case cur.Status != metav1.ConditionTrue && old != nil && old.Status == metav1.ConditionTrue:
			c.events.Eventf(vm, nil, corev1.EventTypeNormal, EventRecovered, "Observe", "The VM no longer fails (was %s: %s)", old.Reason, old.Message)
		}
	}
	if _, cur, ok := changed(v1.ConditionSpecWarnings); ok && cur.Status == metav1.ConditionTrue {
		c.events.Eventf(vm, nil, corev1.EventTypeWarning, EventSpecWarnings, "Render", "%s", cur.Message)
	}
}

// writes collects what one reconcile wrote, for one event per kind of
// write rather than one per object.
type writes struct {
	created, updated, deleted []string
}

func (w *writes) add(list *[]string, kind, name string) { *list = append(*list, kind+" "+name) }

// record tells of the writes as events on the VM.
func (w *writes) record(c *Controller, vm runtime.Object) {
	for _, e := range []struct {
		reason, action string
		objs           []string
	}{
		{EventCreated, "Create", w.created},
		{EventUpdated, "Apply", w.updated},
		{EventDeleted, "Delete", w.deleted},
	} {
		if len(e.objs) > 0 {
			c.events.Eventf(vm, nil, corev1.EventTypeNormal, e.reason, e.action, "%s %s", e.reason, strings.Join(e.objs, ", "))
		}
	}
}

// applyFailedMessage is the Failed condition's and event's message for a
// failed write: the API server's own words, with what was written.
func applyFailedMessage(err error) string {
	return fmt.Sprintf("The VM's objects could not be applied: %v", err)
}
