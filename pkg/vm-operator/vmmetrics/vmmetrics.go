// Package vmmetrics exports per-VM Prometheus metrics computed at scrape
// time from the VirtualMachines in the operator's informer cache, the way
// kube-state-metrics does for pods: nothing is recorded on the write path,
// and a deleted VM's series end with the scrape after the cache drops it.
//
// Cardinality is bounded: every label other than namespace and name takes
// its values from a fixed set (states, failure reasons, condition types;
// what this version does not know becomes "Unknown" or "Other", never a
// new value). A VM has at most 20 series: 5 of vmop_vm_state, 2 of
// vmop_vm_desired_state, 1 each of vmop_vm_failed, vmop_vm_restart_required
// and vmop_vm_paused, 8 of
// vmop_vm_condition_last_transition_timestamp_seconds, and vmop_vm_cpus
// and vmop_vm_ram_bytes; so a scrape has at most 20 x (number of VMs) + 1
// series, the one being vmop_vm_metrics_errors.
package vmmetrics

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// Lister returns the VirtualMachines to report, each at most once (a VM
// listed twice would make the whole scrape fail with duplicate series):
// each a *v1.VirtualMachine, or unstructured (as the operator's cache
// keeps a VM that does not decode). The operator passes its informer
// cache's list; the objects are only read.
type Lister func() ([]runtime.Object, error)

// FromListers is the Lister of the operator's informer caches: the VMs
// of every lister (one per watched namespace, which must not overlap).
// An object of another type is an error, not a panic.
func FromListers(listers ...cache.GenericLister) Lister {
	return func() ([]runtime.Object, error) {
		var vms []runtime.Object
		for _, l := range listers {
			objs, err := l.List(labels.Everything())
			if err != nil {
				return nil, err
			}
			for _, o := range objs {
				switch o.(type) {
				case *v1.VirtualMachine, *unstructured.Unstructured:
					vms = append(vms, o)
				default:
					return nil, fmt.Errorf("virtualmachine cache holds a %T, not a VirtualMachine", o)
				}
			}
		}
		return vms, nil
	}
}

// unknown is the state of a VM whose Running condition is not reported
// yet, or carries a reason this version does not know, and the failure
// reason of a VM whose Failed condition is not reported yet.
const unknown = "Unknown"

// otherReason stands for a Failed or Paused reason this version does not know.
const otherReason = "Other"

// states are the values of vmop_vm_state's state label: the Running
// condition's reasons (the VM's phase) and Unknown.
var states = []string{v1.ReasonStarting, v1.ReasonRunning, v1.ReasonStopping, v1.ReasonStopped, unknown}

// desiredStates are the values of spec.vm.state.
var desiredStates = []v1.VMState{v1.StateRunning, v1.StateStopped}

// failureReasons are the Failed condition's reasons that keep their name
// in vmop_vm_failed; any other becomes otherReason.
var failureReasons = []string{
	v1.ReasonNoFailure, v1.ReasonInvalidSpec, v1.ReasonApplyFailed, v1.ReasonPodCreateFailed,
	v1.ReasonCrashLoop, v1.ReasonQemuFailed, v1.ReasonUnschedulable, v1.ReasonImagePull,
	v1.ReasonContainerCreate, v1.ReasonNetworkFailed, v1.ReasonNodeAgentFailed, v1.ReasonMACConflict,
	v1.ReasonImageRepositoryMissing, v1.ReasonNoDefaultStorageClass, v1.ReasonClaimPending, v1.ReasonServiceAccountMissing,
	v1.ReasonNodeAgentMissing,
}

// pauseReasons are the Paused condition's reasons that keep their name
// in vmop_vm_paused; any other becomes otherReason.
var pauseReasons = []string{v1.ReasonNotPaused, v1.ReasonDiskFull, v1.ReasonDiskError, v1.ReasonGuestPanicked}

// conditionTypes are the conditions whose transition times are exported:
// the operator's and the runner's.
var conditionTypes = []string{
	v1.ConditionRunning, v1.ConditionReady, v1.ConditionRestartRequired, v1.ConditionFailed,
	v1.ConditionSpecWarnings, v1.ConditionBooted, v1.ConditionMediaLoaded, v1.ConditionPaused,
}

var vmLabels = []string{"namespace", "name"}

var (
	// descState: one series per VM and state, 1 for the VM's current
	// state (the Running condition's reason), 0 for the others; so
	// `vmop_vm_state{state="Running"} == 1` selects the running VMs and a
	// state change moves no series.
	descState = prometheus.NewDesc("vmop_vm_state",
		"State of the VM (the Running condition's reason): 1 for the current state, 0 for the others; Unknown until the operator reports it.",
		append(vmLabels, "state"), nil)
	// descDesiredState: spec.vm.state, 1 for Running or Stopped (the
	// default), 0 for the other; compare with vmop_vm_state to find VMs
	// that do not reach what they are asked for.
	descDesiredState = prometheus.NewDesc("vmop_vm_desired_state",
		"Desired state of the VM (spec.vm.state, Stopped when empty): 1 for the desired state, 0 for the other.",
		append(vmLabels, "state"), nil)
	// descFailed: one series per VM, 1 while the Failed condition is
	// True. The reason label is the condition's reason from a fixed set
	// (NoFailure while it is False, Unknown before it is reported, Other
	// for a reason this version does not know).
	descFailed = prometheus.NewDesc("vmop_vm_failed",
		"1 while the VM's Failed condition is True, else 0; reason is the condition's reason (NoFailure, InvalidSpec, ApplyFailed, PodCreateFailed, RunnerCrashLoop, QemuFailed, Unschedulable, ImagePullFailed, ContainerCreateFailed, Other; Unknown before it is reported).",
		append(vmLabels, "reason"), nil)
	// descRestartRequired: 1 while a spec change waits for the VM to be
	// stopped and started.
	descRestartRequired = prometheus.NewDesc("vmop_vm_restart_required",
		"1 while the VM's RestartRequired condition is True (a spec change applies only after a stop and start), else 0.",
		vmLabels, nil)
	// descPaused: 1 while qemu holds the guest paused (a full disk, a
	// disk error, a kernel panic): the VM's pod is running and ready to
	// the eye, yet its guest does nothing, which an alert should catch.
	descPaused = prometheus.NewDesc("vmop_vm_paused",
		"1 while the VM's Paused condition is True (qemu holds the guest), else 0; reason is the condition's reason (NotPaused, DiskFull, DiskError, GuestPanicked, Other; Unknown before the runner reports it).",
		append(vmLabels, "reason"), nil)
	// descTransition: when each condition last changed its status, so
	// that e.g. `time() - vmop_vm_condition_last_transition_timestamp_seconds{condition="Ready"}`
	// tells how long a VM has been (not) ready.
	descTransition = prometheus.NewDesc("vmop_vm_condition_last_transition_timestamp_seconds",
		"Unix time of the last status change of the VM's condition (Running, Ready, RestartRequired, Failed, SpecWarnings, Booted, MediaLoaded, Paused); absent until the condition is reported.",
		append(vmLabels, "condition"), nil)
	// descCPUs and descRAM are what the runner reports the guest has now
	// (after hot-plug and balloon changes), absent while no runner runs.
	descCPUs = prometheus.NewDesc("vmop_vm_cpus",
		"vCPUs the VM's runner reports in use (status.cpus); absent while not reported.",
		vmLabels, nil)
	descRAM = prometheus.NewDesc("vmop_vm_ram_bytes",
		"Guest memory the VM's runner reports in use (status.ram), in bytes; absent while not reported.",
		vmLabels, nil)
	// descErrors makes a failed list or an unreadable status visible
	// without failing the whole scrape, which would hide the operator's
	// other metrics too.
	descErrors = prometheus.NewDesc("vmop_vm_metrics_errors",
		"Errors in computing the per-VM metrics of this scrape: 1 when the VM list could not be read (then there are no per-VM series), else the number of VMs whose status could not be read (their state is Unknown).",
		nil, nil)
)

// Collector is a prometheus.Collector of per-VM metrics. It keeps no
// state: each Collect lists the VMs anew.
type Collector struct {
	list Lister
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector of the VMs that list returns.
func New(list Lister) *Collector {
	return &Collector{list: list}
}

// Describe sends the fixed descriptors, so that a registry can check
// them against other collectors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descDesiredState, descFailed, descRestartRequired,
		descPaused, descTransition, descCPUs, descRAM, descErrors} {
		ch <- d
	}
}

// Collect sends the metrics of every VM that the Lister returns.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	vms, err := c.list()
	if err != nil {
		ch <- gauge(descErrors, 1)
		return
	}
	errs := 0
	for _, vm := range vms {
		if !collectVM(ch, vm) {
			errs++
		}
	}
	ch <- gauge(descErrors, float64(errs))
}

// collectVM sends one VM's series. It returns false when the VM's status
// could not be read (then it shows as not reported) or its RAM could not
// (then vmop_vm_ram_bytes is left out).
func collectVM(ch chan<- prometheus.Metric, obj runtime.Object) bool {
	var (
		ns, name string
		st       v1.VirtualMachineStatus
		ok       = true
		desired  string
	)
	switch vm := obj.(type) {
	case *v1.VirtualMachine:
		ns, name, st, desired = vm.Namespace, vm.Name, vm.Status, string(vm.Spec.VM.State)
	case *unstructured.Unstructured:
		ns, name = vm.GetNamespace(), vm.GetName()
		st, ok = status(vm)
		desired, _, _ = unstructured.NestedString(vm.Object, "spec", "vm", "state")
	default:
		return false
	}

	state := unknown
	if running := apimeta.FindStatusCondition(st.Conditions, v1.ConditionRunning); running != nil {
		state = oneOf(running.Reason, states, unknown)
	}
	for _, s := range states {
		ch <- gauge(descState, boolValue(s == state), ns, name, s)
	}

	// As the operator reads it: anything but Running means stopped.
	want := v1.StateStopped
	if v1.VMState(desired) == v1.StateRunning {
		want = v1.StateRunning
	}
	for _, s := range desiredStates {
		ch <- gauge(descDesiredState, boolValue(s == want), ns, name, string(s))
	}

	reason := unknown
	if failed := apimeta.FindStatusCondition(st.Conditions, v1.ConditionFailed); failed != nil {
		reason = oneOf(failed.Reason, failureReasons, otherReason)
	}
	ch <- gauge(descFailed, boolValue(apimeta.IsStatusConditionTrue(st.Conditions, v1.ConditionFailed)), ns, name, reason)
	ch <- gauge(descRestartRequired, boolValue(apimeta.IsStatusConditionTrue(st.Conditions, v1.ConditionRestartRequired)), ns, name)

	pause := unknown
	if paused := apimeta.FindStatusCondition(st.Conditions, v1.ConditionPaused); paused != nil {
		pause = oneOf(paused.Reason, pauseReasons, otherReason)
	}
	ch <- gauge(descPaused, boolValue(apimeta.IsStatusConditionTrue(st.Conditions, v1.ConditionPaused)), ns, name, pause)

	for _, typ := range conditionTypes {
		if cd := apimeta.FindStatusCondition(st.Conditions, typ); cd != nil && !cd.LastTransitionTime.IsZero() {
			ch <- gauge(descTransition, float64(cd.LastTransitionTime.Unix()), ns, name, typ)
		}
	}

	if st.CPUs > 0 {
		ch <- gauge(descCPUs, float64(st.CPUs), ns, name)
	}
	if st.RAM != "" {
		q, err := resource.ParseQuantity(st.RAM)
		if err != nil {
			return false
		}
		ch <- gauge(descRAM, float64(q.Value()), ns, name)
	}
	return ok
}

// status reads the parts of a VM's status that the metrics show, of one
// the operator's cache keeps unstructured:
// conditions, cpus and ram. A VM without a status has the zero status; an
// unreadable status (a field of another type) also reads as the zero
// status, and false.
//
// It reads the unstructured object by hand: runtime's converter of the
// whole status took about half of a scrape's time with 1000 VMs, most of
// it in decoding the conditions' times through JSON.
func status(vm *unstructured.Unstructured) (v1.VirtualMachineStatus, bool) {
	var st v1.VirtualMachineStatus
	raw, found := vm.Object["status"]
	if !found || raw == nil {
		return st, true
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return st, false
	}
	cpus, _, errCPUs := unstructured.NestedInt64(m, "cpus")
	ram, _, errRAM := unstructured.NestedString(m, "ram")
	// NestedSlice would copy the list deeply.
	conds, ok := m["conditions"].([]any)
	if errCPUs != nil || errRAM != nil || (!ok && m["conditions"] != nil) {
		return st, false
	}
	cs := make([]metav1.Condition, len(conds))
	for i, c := range conds {
		if cs[i], ok = readCondition(c); !ok {
			return st, false
		}
	}
	st.CPUs, st.RAM, st.Conditions = int32(cpus), ram, cs
	return st, true
}

// readCondition reads what the metrics show of a condition.
func readCondition(raw any) (metav1.Condition, bool) {
	var c metav1.Condition
	m, ok := raw.(map[string]any)
	if !ok {
		return c, false
	}
	typ, _, errType := unstructured.NestedString(m, "type")
	st, _, errStatus := unstructured.NestedString(m, "status")
	reason, _, errReason := unstructured.NestedString(m, "reason")
	changed, _, errTime := unstructured.NestedString(m, "lastTransitionTime")
	if errType != nil || errStatus != nil || errReason != nil || errTime != nil {
		return c, false
	}
	c.Type, c.Status, c.Reason = typ, metav1.ConditionStatus(st), reason
	return c, c.LastTransitionTime.UnmarshalQueryParameter(changed) == nil
}

// oneOf is v when it is in the fixed set, else other: the label values
// stay bounded whatever the status says.
func oneOf(v string, set []string, other string) string {
	if slices.Contains(set, v) {
		return v
	}
	return other
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}
