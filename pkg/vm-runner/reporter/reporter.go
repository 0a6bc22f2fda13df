// Package reporter is vm-runner's runner.Reporter for a cluster: it
// writes what the runner observes to its VirtualMachine's status and what
// happens to the VM as Events, and stops the VM (VirtualMachine or, in
// GitOps mode, StatefulSet) on request.
package reporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubeapi"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

// FieldManager owns the status fields that the runner writes.
const FieldManager = "vm-runner"

// Reasons of the conditions the runner writes (v1.ConditionBooted,
// v1.ConditionMediaLoaded; v1.ConditionPaused's are in pkg/api/v1).
// Running, Ready and RestartRequired are the operator's, which sees the
// pod; the guest agent only the runner sees.
const (
	ReasonGuestAgentConnected    = "GuestAgentConnected"
	ReasonGuestAgentNotConnected = "GuestAgentNotConnected"
	// ReasonBootOverdue: the agent has not connected within the runner's
	// wait; the message says what to look at.
	ReasonBootOverdue = runner.ReasonBootOverdue

	ReasonMediaLoaded     = "MediaLoaded"
	ReasonMediumFailed    = runner.ReasonMediumUnavailable
	ReasonMediumWaitsTray = runner.ReasonWaitingForTray
)

// ErrNotInCluster tells that the runner does not run in a pod, so there is
// no VirtualMachine to report to.
var ErrNotInCluster = kubeapi.ErrNotInCluster

// namespaceFile is where a pod finds its namespace.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// options are the timings; tests shorten them.
type options struct {
	// settle gathers a burst of reports into one write.
	settle time.Duration
	// minBackoff and maxBackoff bound the wait after a failed request.
	minBackoff, maxBackoff time.Duration
	// absentRecheck is how long a missing VirtualMachine is believed absent.
	absentRecheck time.Duration
	// stopTimeout bounds Stop when its context has no deadline.
	stopTimeout time.Duration
	// now stamps lastTransitionTime.
	now func() time.Time
}

var defaultOptions = options{
	settle:        100 * time.Millisecond,
	minBackoff:    time.Second,
	maxBackoff:    time.Minute,
	absentRecheck: time.Minute,
	stopTimeout:   10 * time.Second,
	now:           time.Now,
}

// vmState is what the reporter believes about the VirtualMachine.
type vmState int

const (
	vmUnknown vmState = iota
	vmPresent
	vmAbsent
)

// Reporter writes the runner's status to a VirtualMachine and its events
// regarding the VirtualMachine or, in GitOps mode, the StatefulSet. It
// implements runner.Reporter and runner.EventReporter; all methods are
// safe for concurrent use.
type Reporter struct {
	namespace, name string
	// pod is the runner's: the StatefulSet's only pod (the admission
	// policy vm-runner-own-vm relies on the same name).
	pod  string
	log  *slog.Logger
	opts options
	// c is vmop's own API client: client-go would add 2 MB to the
	// runner's binary, and so to its memory, in every VM's pod.
	c *kubeapi.Client
	// vm, scale and events are the API paths of the VirtualMachine, the
	// StatefulSet's scale and the namespace's events.
	vm, scale, events string

	mu     sync.Mutex
	latest runner.Status
	have   bool // latest was reported

	notify   chan struct{}
	stopping chan struct{}
	stopOnce sync.Once
	// eventsOnly: Stop writes no final status (see StopEvents).
	eventsOnly atomic.Bool
	done       chan struct{}
	finalErr   error // set before done is closed
	runCtx     context.Context
	cancel     context.CancelFunc

	eventQ     chan queuedEvent
	eventsDone chan struct{}
	// regarding is what the events are about, nil until the status writer
	// knows whether there is a VirtualMachine; known is closed then.
	regarding atomic.Pointer[corev1.ObjectReference]
	known     chan struct{}
	knownOnce sync.Once
	// series are the events written lately; owned by the event writer.
	series map[seriesKey]*series

	// Owned by the goroutine.
	state      vmState
	generation int64
	// conditions are the VirtualMachine's as last read, by type.
	conditions map[string]metav1.Condition
	written    *runner.Status
	failures   int
}

var (
	_ runner.Reporter      = (*Reporter)(nil)
	_ runner.EventReporter = (*Reporter)(nil)
)

// New returns a Reporter for the VirtualMachine namespace/vm and starts
// its writers; Stop ends them. A nil log means slog.Default().
func New(cfg *kubeapi.Config, namespace, vm string, log *slog.Logger) (*Reporter, error) {
	return newReporter(cfg, namespace, vm, log, defaultOptions)
}

// InCluster is New with the pod's service account and namespace. Outside
// a pod it returns an error that matches ErrNotInCluster (errors.Is), so
// that a caller can run without reporting.
func InCluster(vm string, log *slog.Logger) (*Reporter, error) {
	cfg, ns, err := InClusterConfig()
	if err != nil {
		return nil, err
	}
	return New(cfg, ns, vm, log)
}

// InClusterConfig returns the pod's service account and namespace, or an
// error that matches ErrNotInCluster outside a pod.
func InClusterConfig() (*kubeapi.Config, string, error) {
	cfg, err := kubeapi.InCluster()
	if err != nil {
		return nil, "", err
	}
	ns, err := os.ReadFile(namespaceFile)
	if err != nil {
		return nil, "", fmt.Errorf("namespace of the pod: %w", err)
	}
	return cfg, strings.TrimSpace(string(ns)), nil
}

func newReporter(cfg *kubeapi.Config, namespace, vm string, log *slog.Logger, opts options) (*Reporter, error) {
	if namespace == "" || vm == "" {
		return nil, fmt.Errorf("status reporter: namespace (%q) and VM name (%q) are required", namespace, vm)
	}
	if log == nil {
		log = slog.Default()
	}
	copied := *cfg
	if copied.UserAgent == "" {
		// Also names the field manager of the events it creates.
		copied.UserAgent = "vm-runner/" + version.Get()
	}
	// Each request is bounded (kubeapi's timeout): a hung one must not
	// hold up Stop or a later status.
	c, err := kubeapi.New(&copied)
	if err != nil {
		return nil, fmt.Errorf("status reporter: %w", err)
	}
	gvr := v1.GroupVersionResource
	r := &Reporter{
		namespace:  namespace,
		name:       vm,
		log:        log.With("vm", namespace+"/"+vm),
		opts:       opts,
		c:          c,
		vm:         "/apis/" + gvr.Group + "/" + gvr.Version + "/namespaces/" + namespace + "/" + gvr.Resource + "/" + vm,
		scale:      "/apis/apps/v1/namespaces/" + namespace + "/statefulsets/" + vm + "/scale",
		events:     "/apis/events.k8s.io/v1/namespaces/" + namespace + "/events",
		pod:        vm + "-0",
		notify:     make(chan struct{}, 1),
		stopping:   make(chan struct{}),
		done:       make(chan struct{}),
		eventQ:     make(chan queuedEvent, eventQueue),
		eventsDone: make(chan struct{}),
		known:      make(chan struct{}),
		series:     map[seriesKey]*series{},
	}
	r.runCtx, r.cancel = context.WithCancel(context.Background())
	go r.run()
	go r.writeEvents()
	return r, nil
}

// Report hands s to the writer and returns at once; of a burst only the
// newest status is written. ctx is not used: the write outlives the call.
func (r *Reporter) Report(_ context.Context, s runner.Status) {
	s.RestartRequired = slices.Clone(s.RestartRequired)
	r.mu.Lock()
	r.latest, r.have = s, true
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Stop writes the final status (the VM not running, as qemu ends with the
// runner) and the events reported before, and ends the writers. ctx bounds
// the writes; without a deadline a default applies. Pass a fresh context:
// the runner's is usually cancelled by then. Later calls return the first
// result.
func (r *Reporter) Stop(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.stopTimeout)
		defer cancel()
	}
	r.stopOnce.Do(func() { close(r.stopping) })
	// An expired ctx aborts the requests in flight too. The returns on
	// ctx.Done cancel themselves: the deferred stop may unregister the
	// AfterFunc before its goroutine ran.
	defer context.AfterFunc(ctx, r.cancel)()
	select {
	case <-r.eventsDone:
	case <-ctx.Done():
		r.cancel()
		return fmt.Errorf("events of %s/%s: %w", r.namespace, r.name, ctx.Err())
	}
	select {
	case <-r.done:
		r.cancel()
		return r.finalErr
	case <-ctx.Done():
		r.cancel()
		return fmt.Errorf("final status of %s/%s: %w", r.namespace, r.name, ctx.Err())
	}
}

// StopEvents is Stop for a reporter that reported events alone (vm-runner
// import, before the runner starts): it writes no final status, which is
// the runner's to write.
func (r *Reporter) StopEvents(ctx context.Context) error {
	r.eventsOnly.Store(true)
	return r.Stop(ctx)
}

// SetStopped sets the VirtualMachine's spec.vm.state to Stopped or, when
// there is no VirtualMachine (GitOps mode), scales the StatefulSet named
// like it to 0.
func (r *Reporter) SetStopped(ctx context.Context) error {
	patch := []byte(`{"spec":{"vm":{"state":"Stopped"}}}`)
	err := r.c.Patch(ctx, r.vm, kubeapi.MergePatch, patch, managedBy(FieldManager, false), nil)
	if err == nil {
		r.log.Info("Set the VirtualMachine's state to Stopped")
		return nil
	}
	if !kubeapi.IsStatus(err, http.StatusNotFound) {
		return fmt.Errorf("virtualmachine %s/%s: set spec.vm.state to Stopped: %w", r.namespace, r.name, err)
	}
	// A patch of the scale subresource: 0 whatever the current replicas.
	err = r.c.Patch(ctx, r.scale, kubeapi.MergePatch, []byte(`{"spec":{"replicas":0}}`), managedBy(FieldManager, false), nil)
	if err != nil {
		return fmt.Errorf("statefulset %s/%s: scale to 0: %w", r.namespace, r.name, err)
	}
	r.log.Info("No VirtualMachine; scaled the StatefulSet to 0 (a GitOps sync may start it again)")
	return nil
}

// run is the writer: it wakes on reports (after a settle time, to gather
// bursts) and on its retry timer, until Stop.
func (r *Reporter) run() {
	defer close(r.done)
	var (
		timer   *time.Timer
		timerC  <-chan time.Time
		nextTry time.Time
	)
	arm := func(at time.Time) {
		if timerC != nil {
			return // already due; a report then finds the newest status
		}
		timer = time.NewTimer(time.Until(at))
		timerC = timer.C
	}
	arm(time.Now()) // look for the VirtualMachine at once
	for {
		select {
		case <-r.stopping:
			if timer != nil {
				timer.Stop()
			}
			r.finalErr = r.final()
			return
		case <-r.notify:
			at := time.Now().Add(r.opts.settle)
			if at.Before(nextTry) {
				at = nextTry
			}
			arm(at)
		case <-timerC:
			timerC = nil
			nextTry = r.step(r.runCtx)
			if !nextTry.IsZero() {
				arm(nextTry)
			}
		}
	}
}

// step brings the status up to date; it returns when to try again, or
// zero when only a new report needs another step.
func (r *Reporter) step(ctx context.Context) time.Time {
	if r.state != vmPresent {
		var vm vmObject
		if err := r.c.Get(ctx, r.vm, &vm); err != nil {
			return r.failed(err, "read")
		}
		if r.state == vmAbsent {
			r.log.Info("The VirtualMachine exists now; reporting its status")
		}
		r.state = vmPresent
		r.setRegarding(r.vmRef(vm.Metadata.UID))
		r.observe(&vm)
	}
	r.mu.Lock()
	s, have := r.latest, r.have
	r.mu.Unlock()
	if !have || (r.written != nil && sameStatus(*r.written, s)) {
		return time.Time{}
	}
	var vm vmObject
	if err := r.applyStatus(ctx, r.statusObject(s), FieldManager, &vm); err != nil {
		return r.failed(err, "write status of")
	}
	r.written = &s
	r.failures = 0
	r.observe(&vm)
	r.log.Debug("Wrote the status", "running", s.Running, "booted", s.Booted, "cpus", s.CPUs, "ram", s.RAM)
	return time.Time{}
}

// failed logs err and tells when to try again: after a minute for a
// missing VirtualMachine (GitOps mode has none), else with backoff.
func (r *Reporter) failed(err error, what string) time.Time {
	if kubeapi.IsStatus(err, http.StatusNotFound) {
		if r.state != vmAbsent {
			r.log.Info("No VirtualMachine (GitOps mode?); the status is not reported, events regard the StatefulSet", "recheck", r.opts.absentRecheck)
		}
		r.state = vmAbsent
		r.setRegarding(r.statefulSetRef())
		r.written = nil
		r.failures = 0
		return time.Now().Add(r.opts.absentRecheck)
	}
	if errors.Is(err, context.Canceled) {
		return time.Time{}
	}
	d := r.backoff(r.failures)
	r.failures++
	attrs := []any{"err", err, "retry", d}
	if kubeapi.IsStatus(err, http.StatusForbidden) {
		attrs = append(attrs, "hint", "the vm-runner service account needs the vm-runner Role")
	}
	r.log.Warn("Cannot "+what+" the VirtualMachine", attrs...)
	return time.Now().Add(d)
}

// backoff is the wait after the given number of failures in a row.
func (r *Reporter) backoff(failures int) time.Duration {
	d := r.opts.minBackoff << min(failures, 16)
	if d <= 0 || d > r.opts.maxBackoff {
		d = r.opts.maxBackoff
	}
	return d
}

// final writes the status for a stopped runner, retrying until the
// context ends; a missing VirtualMachine is no error.
func (r *Reporter) final() error {
	if r.eventsOnly.Load() {
		return nil
	}
	r.mu.Lock()
	r.latest.Running, r.latest.Booted, r.latest.ConsoleClient = false, false, ""
	r.latest.Guest = guestagent.Info{}
	r.have = true
	r.mu.Unlock()
	var err error
	for {
		if r.state == vmAbsent {
			return nil
		}
		next := r.step(r.runCtx)
		if next.IsZero() {
			if r.runCtx.Err() != nil {
				return fmt.Errorf("final status of %s/%s: %w", r.namespace, r.name, r.runCtx.Err())
			}
			return nil
		}
		err = fmt.Errorf("final status of %s/%s not written", r.namespace, r.name)
		// Shorter waits than in the loop: Stop's deadline is near.
		wait := min(time.Until(next), 500*time.Millisecond)
		select {
		case <-r.runCtx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// vmObject is what the reporter reads of a VirtualMachine.
type vmObject struct {
	Metadata struct {
		UID        types.UID `json:"uid"`
		Generation int64     `json:"generation"`
	} `json:"metadata"`
	Status struct {
		// Conditions are decoded apart: one that does not decode must
		// not keep the status from being written.
		Conditions json.RawMessage `json:"conditions"`
	} `json:"status"`
}

// observe takes the generation and conditions from a read or written VM.
func (r *Reporter) observe(vm *vmObject) {
	r.generation = vm.Metadata.Generation
	r.conditions = r.conditionsOf(vm)
}

// conditionsOf are a VM's conditions by type.
func (r *Reporter) conditionsOf(vm *vmObject) map[string]metav1.Condition {
	conds := map[string]metav1.Condition{}
	if len(vm.Status.Conditions) == 0 {
		return conds
	}
	var list []metav1.Condition
	if err := json.Unmarshal(vm.Status.Conditions, &list); err != nil {
		r.log.Warn("Cannot read the VirtualMachine's conditions", "err", err)
		return conds
	}
	for _, c := range list {
		conds[c.Type] = c
	}
	return conds
}

// applyStatus writes status, as manager's, to the VirtualMachine by a
// server-side apply, and reads the VM it answers into vm unless nil.
func (r *Reporter) applyStatus(ctx context.Context, status map[string]any, manager string, vm *vmObject) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": v1.APIVersion,
		"kind":       v1.Kind,
		"metadata":   map[string]any{"name": r.name, "namespace": r.namespace},
		"status":     status,
	})
	if err != nil {
		return err
	}
	var into any // not a nil *vmObject
	if vm != nil {
		into = vm
	}
	return r.c.Patch(ctx, r.vm+"/status", kubeapi.ApplyPatch, body, managedBy(manager, true), into)
}

// managedBy is the query of a write by manager, forced for an apply.
func managedBy(manager string, force bool) url.Values {
	q := url.Values{"fieldManager": {manager}}
	if force {
		q.Set("force", "true")
	}
	return q
}

// statusObject is the status to apply: only the fields the runner owns,
// so that the operator's fields and conditions stay. A field left out is
// removed, since the runner owned it before.
func (r *Reporter) statusObject(s runner.Status) map[string]any {
	status := map[string]any{
		"conditions":    r.conditionList(s),
		"runnerVersion": version.Get(),
	}
	if s.CPUs != 0 {
		status["cpus"] = int64(s.CPUs)
	}
	if s.RAM != 0 {
		status["ram"] = v1.FormatBytes(s.RAM)
	}
	if s.Accelerator != "" {
		status["accelerator"] = s.Accelerator
	}
	if s.ConsoleClient != "" {
		status["consoleClient"] = s.ConsoleClient
	}
	if s.DisplayPasswordSerial != 0 {
		status["displayPasswordSerial"] = s.DisplayPasswordSerial
	}
	for k, v := range guestStatus(s.Guest) {
		status[k] = v
	}
	return status
}

// guestStatus is what the guest agent told, in the status fields of
// v1.VirtualMachineStatus; empty while no agent is connected.
func guestStatus(g guestagent.Info) map[string]any {
	status := map[string]any{}
	if g.AgentVersion != "" {
		status["guestAgentVersion"] = g.AgentVersion
	}
	if g.Hostname != "" {
		status["hostname"] = g.Hostname
	}
	if g.OS != (v1.OSInfo{}) {
		var osinfo map[string]any
		b, _ := json.Marshal(g.OS)
		_ = json.Unmarshal(b, &osinfo)
		status["osinfo"] = osinfo
	}
	var ifaces []any
	for _, i := range g.Interfaces {
		if i.Name == "lo" {
			continue
		}
		iface := map[string]any{"name": i.Name}
		if i.HardwareAddress != "" {
			iface["mac"] = i.HardwareAddress
		}
		var ips []any
		for _, a := range i.IPAddresses {
			ips = append(ips, fmt.Sprintf("%s/%d", a.Address, a.Prefix))
		}
		if ips != nil {
			iface["ipAddresses"] = ips
		}
		ifaces = append(ifaces, iface)
	}
	if ifaces != nil {
		status["interfaces"] = ifaces
	}
	return status
}

// conditionList builds the runner's conditions; a condition keeps its
// lastTransitionTime unless its status flips.
func (r *Reporter) conditionList(s runner.Status) []any {
	booted := cond(v1.ConditionBooted, s.Booted, ReasonGuestAgentConnected, "The guest agent is connected.",
		ReasonGuestAgentNotConnected, "The guest agent is not connected.")
	if !s.Booted && s.BootOverdue > 0 {
		booted.Reason, booted.Message = ReasonBootOverdue, runner.BootOverdueMessage(s.BootOverdue)+"."
	}
	var list []any
	for _, c := range []metav1.Condition{booted, mediaCondition(s.CDProblems), pausedCondition(s)} {
		list = append(list, r.conditionObject(c, r.generation, r.conditions))
	}
	return list
}

// conditionObject is c for an apply: observed at generation, its
// lastTransitionTime kept from old (the VM's conditions by type) unless
// its status flips.
func (r *Reporter) conditionObject(c metav1.Condition, generation int64, old map[string]metav1.Condition) map[string]any {
	c.ObservedGeneration = generation
	c.LastTransitionTime = metav1.NewTime(r.opts.now().Truncate(time.Second))
	if o, ok := old[c.Type]; ok && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
		c.LastTransitionTime = o.LastTransitionTime
	}
	return map[string]any{
		"type":               c.Type,
		"status":             string(c.Status),
		"reason":             c.Reason,
		"message":            c.Message,
		"observedGeneration": c.ObservedGeneration,
		"lastTransitionTime": c.LastTransitionTime.UTC().Format(time.RFC3339),
	}
}

// mediaCondition names each CD drive without its medium by the spec's
// field, so that the user knows what to fix.
func mediaCondition(ps []runner.CDProblem) metav1.Condition {
	if len(ps) == 0 {
		return metav1.Condition{Type: v1.ConditionMediaLoaded, Status: metav1.ConditionTrue, Reason: ReasonMediaLoaded,
			Message: "Every CD drive holds the medium its spec names."}
	}
	reason := ReasonMediumWaitsTray
	var msgs []string
	for _, p := range ps {
		if p.Err != "" {
			reason = ReasonMediumFailed
		}
		msgs = append(msgs, p.String())
	}
	return metav1.Condition{Type: v1.ConditionMediaLoaded, Status: metav1.ConditionFalse, Reason: reason, Message: strings.Join(msgs, "; ") + "."}
}

// pausedCondition says what holds the guest paused (a panic, a disk) and
// what to do.
func pausedCondition(s runner.Status) metav1.Condition {
	if s.GuestPanic {
		return metav1.Condition{Type: v1.ConditionPaused, Status: metav1.ConditionTrue, Reason: v1.ReasonGuestPanicked, Message: runner.GuestPanicMessage + "."}
	}
	p := s.DiskPause
	if p == nil {
		return metav1.Condition{Type: v1.ConditionPaused, Status: metav1.ConditionFalse, Reason: v1.ReasonNotPaused,
			Message: "No disk error holds the guest paused."}
	}
	reason := v1.ReasonDiskError
	if p.NoSpace {
		reason = v1.ReasonDiskFull
	}
	return metav1.Condition{Type: v1.ConditionPaused, Status: metav1.ConditionTrue, Reason: reason, Message: p.String() + "."}
}

func cond(typ string, on bool, trueReason, trueMsg, falseReason, falseMsg string) metav1.Condition {
	if on {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: trueReason, Message: trueMsg}
	}
	return metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: falseReason, Message: falseMsg}
}

// sameStatus compares what the reporter writes of two statuses; Running
// and RestartRequired are the operator's to report.
func sameStatus(a, b runner.Status) bool {
	return a.Booted == b.Booted && a.BootOverdue == b.BootOverdue && a.CPUs == b.CPUs && a.RAM == b.RAM && a.Accelerator == b.Accelerator &&
		a.ConsoleClient == b.ConsoleClient && a.DisplayPasswordSerial == b.DisplayPasswordSerial &&
		reflect.DeepEqual(a.Guest, b.Guest) && slices.Equal(a.CDProblems, b.CDProblems) &&
		reflect.DeepEqual(a.DiskPause, b.DiskPause) && a.GuestPanic == b.GuestPanic
}
