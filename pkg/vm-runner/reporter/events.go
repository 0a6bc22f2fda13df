package reporter

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubeapi"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

// ReportingController names vm-runner as the source of its events; the
// admission policy vm-runner-own-vm lets a runner write no other.
const ReportingController = "vmoperator.jdrupes.org/vm-runner"

const (
	// eventQueue bounds the events that wait for the API server: an
	// unreachable server costs at most that many, and then drops.
	eventQueue = 64
	// seriesWindow: an event like one of less than this ago counts in the
	// earlier one's series instead of making another (client-go's event
	// broadcaster ends a series after as long).
	seriesWindow = 6 * time.Minute
	// noteLimit is the API server's limit of an event's note, in bytes.
	noteLimit = 1024
)

// The events are written with pkg/kubeapi, not client-go's tools/events,
// which would link client-go and the typed clientset of every API group
// (see Reporter.c).

// queuedEvent is an event and when the runner reported it.
type queuedEvent struct {
	runner.Event
	at time.Time
}

// seriesKey tells events that are the same but for their time.
type seriesKey struct {
	warning                 bool
	reason, action, message string
	regarding               corev1.ObjectReference
}

// series is an event written before: its object and how often it came.
type series struct {
	name  string
	count int32
	last  time.Time
}

// Event queues e for writing and returns at once; when too many wait
// (the API server has been unreachable for long), e is dropped with a
// log line. Stop writes the ones reported before it.
func (r *Reporter) Event(_ context.Context, e runner.Event) {
	select {
	case r.eventQ <- queuedEvent{Event: e, at: r.opts.now()}:
	default:
		r.log.Warn("Too many events wait for the API server: dropped one", "reason", e.Reason, "message", e.Message)
	}
}

// setRegarding tells the event writer what the events are about; the
// status writer calls it once it knows whether there is a VirtualMachine.
func (r *Reporter) setRegarding(ref *corev1.ObjectReference) {
	r.regarding.Store(ref)
	r.knownOnce.Do(func() { close(r.known) })
}

func (r *Reporter) vmRef(uid types.UID) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1.APIVersion, Kind: v1.Kind, Namespace: r.namespace, Name: r.name, UID: uid}
}

// statefulSetRef is the GitOps mode's object. Without its UID (the runner
// may not read StatefulSets), kubectl events --for finds the events,
// kubectl describe does not.
func (r *Reporter) statefulSetRef() *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: r.namespace, Name: r.name}
}

// writeEvents writes the queued events in order until Stop, then those
// still queued.
func (r *Reporter) writeEvents() {
	defer close(r.eventsDone)
	for {
		select {
		case e := <-r.eventQ:
			r.writeEvent(e)
		case <-r.stopping:
			for {
				select {
				case e := <-r.eventQ:
					r.writeEvent(e)
				default:
					return
				}
			}
		}
	}
}

// writeEvent writes e, retrying with backoff, until it is written, cannot
// be (invalid, forbidden), or Stop's deadline has passed.
func (r *Reporter) writeEvent(e queuedEvent) {
	select {
	case <-r.known:
	case <-r.runCtx.Done():
		r.log.Warn("Event not written: the API server did not answer", "reason", e.Reason, "message", e.Message)
		return
	}
	for failures := 0; ; failures++ {
		if r.runCtx.Err() != nil {
			r.log.Warn("Event not written in time", "reason", e.Reason, "message", e.Message)
			return
		}
		err := r.sendEvent(e)
		switch {
		case err == nil:
			return
		case errors.Is(err, context.Canceled):
			continue // said above
		case kubeapi.IsStatus(err, http.StatusForbidden) || kubeapi.IsStatus(err, http.StatusUnprocessableEntity) ||
			kubeapi.IsStatus(err, http.StatusBadRequest):
			r.log.Warn("Event not written", "reason", e.Reason, "message", e.Message, "err", err)
			return
		}
		d := r.backoff(failures)
		select {
		case <-r.stopping:
			d = min(d, 500*time.Millisecond) // Stop's deadline is near
		default:
		}
		r.log.Warn("Cannot write an event", "reason", e.Reason, "err", err, "retry", d)
		select {
		case <-time.After(d):
		case <-r.runCtx.Done():
		}
	}
}

// sendEvent creates e, or adds it to the series of the same event when
// that was written less than seriesWindow before.
func (r *Reporter) sendEvent(e queuedEvent) error {
	ref := *r.regarding.Load()
	key := seriesKey{warning: e.Warning, reason: e.Reason, action: e.Action, message: e.Message, regarding: ref}
	for k, s := range r.series {
		if e.at.Sub(s.last) >= seriesWindow {
			delete(r.series, k)
		}
	}
	if s, ok := r.series[key]; ok {
		count := s.count + 1
		patch, _ := json.Marshal(map[string]any{"series": map[string]any{
			"count": count, "lastObservedTime": metav1.NewMicroTime(e.at),
		}})
		err := r.c.Patch(r.runCtx, r.events+"/"+s.name, kubeapi.MergePatch, patch, managedBy(FieldManager, false), nil)
		switch {
		case err == nil:
			s.count, s.last = count, e.at
			return nil
		case !kubeapi.IsStatus(err, http.StatusNotFound):
			return err
		}
		delete(r.series, key) // expired (the API server keeps events for an hour): a new one
	}
	// A create whose answer was lost is made again: better twice than
	// never.
	var created struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := r.c.Create(r.runCtx, r.events, r.eventObject(ref, e), &created); err != nil {
		return err
	}
	r.series[key] = &series{name: created.Metadata.Name, count: 1, last: e.at}
	return nil
}

// eventObject is e as an events.k8s.io/v1 Event about ref, related to the
// runner's pod. The API server names it: events of the same moment must
// not share a name.
func (r *Reporter) eventObject(ref corev1.ObjectReference, e queuedEvent) *eventsv1.Event {
	typ := corev1.EventTypeNormal
	if e.Warning {
		typ = corev1.EventTypeWarning
	}
	return &eventsv1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: eventsv1.SchemeGroupVersion.String(), Kind: "Event"},
		ObjectMeta:          metav1.ObjectMeta{GenerateName: ref.Name + "-", Namespace: r.namespace},
		EventTime:           metav1.NewMicroTime(e.at),
		ReportingController: ReportingController,
		ReportingInstance:   r.pod,
		Action:              e.Action,
		Reason:              e.Reason,
		Note:                truncate(e.Message, noteLimit),
		Type:                typ,
		Regarding:           ref,
		Related:             &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: r.namespace, Name: r.pod},
	}
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
