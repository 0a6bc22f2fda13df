package vmmetrics

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmstatus"
)

// The VMs below carry statuses in the shape the operator
// (pkg/vm-operator/controller/status.go) and the runner (pkg/vm-runner/reporter) write.

// webVM runs, with the runner's conditions, CPUs and RAM.
const webVM = `
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: web, namespace: prod, generation: 3}
spec:
  vm: {state: Running, maximumCpus: 4, currentCpus: 2, maximumRam: 8Gi, currentRam: 4Gi}
status:
  observedGeneration: 3
  node: node-1
  runnerVersion: v0.5.0
  cpus: 2
  ram: 4Gi
  accelerator: kvm
  hostname: web
  osinfo: {id: debian, version-id: "12"}
  interfaces: [{name: eth0, mac: "52:54:00:12:34:56", ipAddresses: [10.0.2.15/24]}]
  conditions:
  - {type: Running, status: "True", reason: Running, message: The runner pod runs on node-1., observedGeneration: 3, lastTransitionTime: "2026-11-20T10:00:00Z"}
  - {type: Ready, status: "True", reason: PodReady, message: The runner reports the VM ready., observedGeneration: 3, lastTransitionTime: "2026-11-20T10:00:05Z"}
  - {type: RestartRequired, status: "False", reason: UpToDate, message: The VM runs with its current spec., observedGeneration: 3, lastTransitionTime: "2026-11-20T09:00:00Z"}
  - {type: Failed, status: "False", reason: NoFailure, message: "", observedGeneration: 3, lastTransitionTime: "2026-11-20T09:00:00Z"}
  - {type: SpecWarnings, status: "False", reason: NoWarnings, message: "", observedGeneration: 3, lastTransitionTime: "2026-11-20T09:00:00Z"}
  - {type: Booted, status: "True", reason: GuestAgentConnected, message: The guest agent is connected., observedGeneration: 3, lastTransitionTime: "2026-11-20T10:00:41Z"}
  - {type: MediaLoaded, status: "True", reason: MediaLoaded, message: Every CD drive holds the medium its spec names., observedGeneration: 3, lastTransitionTime: "2026-11-20T10:00:41Z"}
  - {type: Paused, status: "False", reason: NotPaused, message: qemu runs the guest., observedGeneration: 3, lastTransitionTime: "2026-11-20T10:00:02Z"}
`

// brokenVM fails for a reason this version does not know, and waits for
// a restart; no runner has reported.
const brokenVM = `
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: broken, namespace: dev, generation: 7}
spec:
  vm: {state: Running}
status:
  observedGeneration: 7
  conditions:
  - {type: Running, status: "False", reason: Starting, message: Waiting for the runner pod., observedGeneration: 7, lastTransitionTime: "2026-11-21T08:30:00Z"}
  - {type: Ready, status: "False", reason: PodNotReady, message: The VM has no pod., observedGeneration: 7, lastTransitionTime: "2026-11-21T08:30:00Z"}
  - {type: RestartRequired, status: "True", reason: SpecChanged, message: stop and start the VM to apply it., observedGeneration: 7, lastTransitionTime: "2026-11-21T08:30:00Z"}
  - {type: Failed, status: "True", reason: VolumeAttachFailed, message: "a reason of a later version", observedGeneration: 7, lastTransitionTime: "2026-11-21T08:31:00Z"}
  - {type: SpecWarnings, status: "True", reason: Warnings, message: "spec.vm.maximumRam: 256M rounded up to 245Mi.", observedGeneration: 7, lastTransitionTime: "2026-11-21T08:30:00Z"}
`

// freshVM is new: no status yet, no state (Stopped).
const freshVM = `
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: fresh, namespace: dev, generation: 1}
spec:
  vm: {maximumRam: 1Gi}
`

func vm(t testing.TB, manifest string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(manifest))
	require.NoError(t, err)
	// Decoded as client-go's dynamic client and informers decode: whole
	// numbers as int64.
	u := &unstructured.Unstructured{}
	require.NoError(t, u.UnmarshalJSON(j))
	return u
}

// help is each metric's HELP and TYPE lines, as the exposition shows them.
var help = map[string]string{
	"vmop_vm_state":            "State of the VM (the Running condition's reason): 1 for the current state, 0 for the others; Unknown until the operator reports it.",
	"vmop_vm_desired_state":    "Desired state of the VM (spec.vm.state, Stopped when empty): 1 for the desired state, 0 for the other.",
	"vmop_vm_failed":           "1 while the VM's Failed condition is True, else 0; reason is the condition's reason (NoFailure, InvalidSpec, ApplyFailed, PodCreateFailed, RunnerCrashLoop, QemuFailed, Unschedulable, ImagePullFailed, ContainerCreateFailed, Other; Unknown before it is reported).",
	"vmop_vm_restart_required": "1 while the VM's RestartRequired condition is True (a spec change applies only after a stop and start), else 0.",
	"vmop_vm_paused":           "1 while the VM's Paused condition is True (qemu holds the guest), else 0; reason is the condition's reason (NotPaused, DiskFull, DiskError, GuestPanicked, Other; Unknown before the runner reports it).",
	"vmop_vm_condition_last_transition_timestamp_seconds": "Unix time of the last status change of the VM's condition (Running, Ready, RestartRequired, Failed, SpecWarnings, Booted, MediaLoaded, Paused); absent until the condition is reported.",
	"vmop_vm_cpus":           "vCPUs the VM's runner reports in use (status.cpus); absent while not reported.",
	"vmop_vm_ram_bytes":      "Guest memory the VM's runner reports in use (status.ram), in bytes; absent while not reported.",
	"vmop_vm_metrics_errors": "Errors in computing the per-VM metrics of this scrape: 1 when the VM list could not be read (then there are no per-VM series), else the number of VMs whose status could not be read (their state is Unknown).",
}

// exposition is the expected text: each metric's samples (lines that
// start with its name) under its HELP and TYPE lines.
func exposition(samples string) string {
	var b strings.Builder
	lines := strings.Split(strings.TrimSpace(samples), "\n")
	names := make([]string, 0, len(help))
	for name := range help {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		var own []string
		for _, l := range lines {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
				own = append(own, l)
			}
		}
		if own == nil {
			continue
		}
		b.WriteString("# HELP " + name + " " + help[name] + "\n# TYPE " + name + " gauge\n")
		b.WriteString(strings.Join(own, "\n") + "\n")
	}
	return b.String()
}

func static[T runtime.Object](vms ...T) Lister {
	objs := make([]runtime.Object, len(vms))
	for i, vm := range vms {
		objs[i] = vm
	}
	return func() ([]runtime.Object, error) { return objs, nil }
}

// typed decodes a VM as the operator's cache keeps it.
func typed(t testing.TB, manifest string) *v1.VirtualMachine {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(manifest))
	require.NoError(t, err)
	vm, err := v1.DecodeJSON(j)
	require.NoError(t, err)
	return vm
}

// allSamples are the series of webVM, brokenVM and freshVM.
const allSamples = `
vmop_vm_state{name="web",namespace="prod",state="Starting"} 0
vmop_vm_state{name="web",namespace="prod",state="Running"} 1
vmop_vm_state{name="web",namespace="prod",state="Stopping"} 0
vmop_vm_state{name="web",namespace="prod",state="Stopped"} 0
vmop_vm_state{name="web",namespace="prod",state="Unknown"} 0
vmop_vm_state{name="broken",namespace="dev",state="Starting"} 1
vmop_vm_state{name="broken",namespace="dev",state="Running"} 0
vmop_vm_state{name="broken",namespace="dev",state="Stopping"} 0
vmop_vm_state{name="broken",namespace="dev",state="Stopped"} 0
vmop_vm_state{name="broken",namespace="dev",state="Unknown"} 0
vmop_vm_state{name="fresh",namespace="dev",state="Starting"} 0
vmop_vm_state{name="fresh",namespace="dev",state="Running"} 0
vmop_vm_state{name="fresh",namespace="dev",state="Stopping"} 0
vmop_vm_state{name="fresh",namespace="dev",state="Stopped"} 0
vmop_vm_state{name="fresh",namespace="dev",state="Unknown"} 1
vmop_vm_desired_state{name="web",namespace="prod",state="Running"} 1
vmop_vm_desired_state{name="web",namespace="prod",state="Stopped"} 0
vmop_vm_desired_state{name="broken",namespace="dev",state="Running"} 1
vmop_vm_desired_state{name="broken",namespace="dev",state="Stopped"} 0
vmop_vm_desired_state{name="fresh",namespace="dev",state="Running"} 0
vmop_vm_desired_state{name="fresh",namespace="dev",state="Stopped"} 1
vmop_vm_failed{name="web",namespace="prod",reason="NoFailure"} 0
vmop_vm_failed{name="broken",namespace="dev",reason="Other"} 1
vmop_vm_failed{name="fresh",namespace="dev",reason="Unknown"} 0
vmop_vm_restart_required{name="web",namespace="prod"} 0
vmop_vm_restart_required{name="broken",namespace="dev"} 1
vmop_vm_restart_required{name="fresh",namespace="dev"} 0
vmop_vm_paused{name="web",namespace="prod",reason="NotPaused"} 0
vmop_vm_paused{name="broken",namespace="dev",reason="Unknown"} 0
vmop_vm_paused{name="fresh",namespace="dev",reason="Unknown"} 0
vmop_vm_condition_last_transition_timestamp_seconds{condition="Running",name="web",namespace="prod"} 1795168800
vmop_vm_condition_last_transition_timestamp_seconds{condition="Ready",name="web",namespace="prod"} 1795168805
vmop_vm_condition_last_transition_timestamp_seconds{condition="RestartRequired",name="web",namespace="prod"} 1795165200
vmop_vm_condition_last_transition_timestamp_seconds{condition="Failed",name="web",namespace="prod"} 1795165200
vmop_vm_condition_last_transition_timestamp_seconds{condition="SpecWarnings",name="web",namespace="prod"} 1795165200
vmop_vm_condition_last_transition_timestamp_seconds{condition="Booted",name="web",namespace="prod"} 1795168841
vmop_vm_condition_last_transition_timestamp_seconds{condition="MediaLoaded",name="web",namespace="prod"} 1795168841
vmop_vm_condition_last_transition_timestamp_seconds{condition="Paused",name="web",namespace="prod"} 1795168802
vmop_vm_condition_last_transition_timestamp_seconds{condition="Running",name="broken",namespace="dev"} 1795249800
vmop_vm_condition_last_transition_timestamp_seconds{condition="Ready",name="broken",namespace="dev"} 1795249800
vmop_vm_condition_last_transition_timestamp_seconds{condition="RestartRequired",name="broken",namespace="dev"} 1795249800
vmop_vm_condition_last_transition_timestamp_seconds{condition="Failed",name="broken",namespace="dev"} 1795249860
vmop_vm_condition_last_transition_timestamp_seconds{condition="SpecWarnings",name="broken",namespace="dev"} 1795249800
vmop_vm_cpus{name="web",namespace="prod"} 2
vmop_vm_ram_bytes{name="web",namespace="prod"} 4294967296
vmop_vm_metrics_errors 0
`

// The same series from VMs as the operator's cache holds them, decoded,
// and from unstructured ones (which it keeps of VMs that do not decode).
func TestCollect(t *testing.T) {
	c := New(static(typed(t, webVM), typed(t, brokenVM), typed(t, freshVM)))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(exposition(allSamples))))
	c = New(static(vm(t, webVM), vm(t, brokenVM), vm(t, freshVM)))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(exposition(allSamples))))
}

func TestKnownFailureReasonKeepsItsName(t *testing.T) {
	crashy := vm(t, brokenVM)
	conds, _, err := unstructured.NestedSlice(crashy.Object, "status", "conditions")
	require.NoError(t, err)
	conds[3].(map[string]any)["reason"] = v1.ReasonQemuFailed
	require.NoError(t, unstructured.SetNestedSlice(crashy.Object, conds, "status", "conditions"))
	want := exposition(`vmop_vm_failed{name="broken",namespace="dev",reason="QemuFailed"} 1`)
	require.NoError(t, testutil.CollectAndCompare(New(static(crashy)), strings.NewReader(want), "vmop_vm_failed"))
}

// A guest that qemu holds (here on a full disk) shows, and a pause reason
// of a later version is Other.
func TestPausedVM(t *testing.T) {
	web := vm(t, webVM)
	conds, _, err := unstructured.NestedSlice(web.Object, "status", "conditions")
	require.NoError(t, err)
	paused := conds[len(conds)-1].(map[string]any)
	require.Equal(t, v1.ConditionPaused, paused["type"])
	paused["status"], paused["reason"] = "True", v1.ReasonDiskFull
	require.NoError(t, unstructured.SetNestedSlice(web.Object, conds, "status", "conditions"))
	want := exposition(`vmop_vm_paused{name="web",namespace="prod",reason="DiskFull"} 1`)
	require.NoError(t, testutil.CollectAndCompare(New(static(web)), strings.NewReader(want), "vmop_vm_paused"))

	paused["reason"] = "Migrating"
	require.NoError(t, unstructured.SetNestedSlice(web.Object, conds, "status", "conditions"))
	want = exposition(`vmop_vm_paused{name="web",namespace="prod",reason="Other"} 1`)
	require.NoError(t, testutil.CollectAndCompare(New(static(web)), strings.NewReader(want), "vmop_vm_paused"))
}

func TestUnknownPhaseIsUnknownState(t *testing.T) {
	later := vm(t, brokenVM)
	conds, _, err := unstructured.NestedSlice(later.Object, "status", "conditions")
	require.NoError(t, err)
	conds[0].(map[string]any)["reason"] = "Migrating"
	require.NoError(t, unstructured.SetNestedSlice(later.Object, conds, "status", "conditions"))
	want := exposition(`
vmop_vm_state{name="broken",namespace="dev",state="Starting"} 0
vmop_vm_state{name="broken",namespace="dev",state="Running"} 0
vmop_vm_state{name="broken",namespace="dev",state="Stopping"} 0
vmop_vm_state{name="broken",namespace="dev",state="Stopped"} 0
vmop_vm_state{name="broken",namespace="dev",state="Unknown"} 1
`)
	require.NoError(t, testutil.CollectAndCompare(New(static(later)), strings.NewReader(want), "vmop_vm_state"))
}

// A deleted VM leaves the informer's cache, and with it the metrics: the
// next scrape has none of its series.
func TestDeletedVMDisappears(t *testing.T) {
	prod := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	dev := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	web, broken, fresh := vm(t, webVM), vm(t, brokenVM), vm(t, freshVM)
	require.NoError(t, prod.Add(web))
	require.NoError(t, dev.Add(broken))
	require.NoError(t, dev.Add(fresh))
	gr := v1.GroupVersionResource.GroupResource()
	c := New(FromListers(cache.NewGenericLister(prod, gr), cache.NewGenericLister(dev, gr)))

	require.Equal(t, 3, vmsIn(t, c), "both namespaces' VMs")
	before := testutil.CollectAndCount(c)

	require.NoError(t, dev.Delete(broken))
	require.Equal(t, 2, vmsIn(t, c))
	require.Equal(t, before-seriesOf(t, broken), testutil.CollectAndCount(c))
	want := exposition(`
vmop_vm_restart_required{name="web",namespace="prod"} 0
vmop_vm_restart_required{name="fresh",namespace="dev"} 0
`)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "vmop_vm_restart_required"))
}

// vmsIn counts the VMs in a scrape by their one vmop_vm_failed series.
func vmsIn(t *testing.T, c *Collector) int {
	t.Helper()
	return testutil.CollectAndCount(c, "vmop_vm_failed")
}

// seriesOf counts the series that one VM has alone.
func seriesOf(t *testing.T, u *unstructured.Unstructured) int {
	t.Helper()
	return testutil.CollectAndCount(New(static(u))) - 1 // without vmop_vm_metrics_errors
}

func TestListError(t *testing.T) {
	c := New(func() ([]runtime.Object, error) { return nil, errors.New("cache not synced") })
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(exposition(`vmop_vm_metrics_errors 1`))))
}

// A cache that holds something else than unstructured VMs (a wiring
// mistake) is reported as a list error, not a panic.
func TestListerOfTypedObjects(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(t, idx.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "dev"}}))
	c := New(FromListers(cache.NewGenericLister(idx, corev1.Resource("pods"))))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(exposition(`vmop_vm_metrics_errors 1`))))
}

// A status that does not read as a VirtualMachineStatus counts as an
// error; the VM keeps its series, as not reported, and the other VMs
// are not affected.
func TestUnreadableStatus(t *testing.T) {
	for name, spoil := range map[string]func(*unstructured.Unstructured) error{
		"cpus not a number": func(u *unstructured.Unstructured) error {
			return unstructured.SetNestedField(u.Object, "two", "status", "cpus")
		},
		"conditions not a list": func(u *unstructured.Unstructured) error {
			return unstructured.SetNestedField(u.Object, "Running", "status", "conditions")
		},
		"a transition time not a time": func(u *unstructured.Unstructured) error {
			conds, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
			if err != nil {
				return err
			}
			conds[5].(map[string]any)["lastTransitionTime"] = "yesterday"
			return unstructured.SetNestedSlice(u.Object, conds, "status", "conditions")
		},
		"status not an object": func(u *unstructured.Unstructured) error {
			return unstructured.SetNestedField(u.Object, "fine", "status")
		},
	} {
		t.Run(name, func(t *testing.T) {
			bad := vm(t, webVM)
			require.NoError(t, spoil(bad))
			c := New(static(bad, vm(t, brokenVM)))
			want := exposition(`
vmop_vm_state{name="web",namespace="prod",state="Starting"} 0
vmop_vm_state{name="web",namespace="prod",state="Running"} 0
vmop_vm_state{name="web",namespace="prod",state="Stopping"} 0
vmop_vm_state{name="web",namespace="prod",state="Stopped"} 0
vmop_vm_state{name="web",namespace="prod",state="Unknown"} 1
vmop_vm_state{name="broken",namespace="dev",state="Starting"} 1
vmop_vm_state{name="broken",namespace="dev",state="Running"} 0
vmop_vm_state{name="broken",namespace="dev",state="Stopping"} 0
vmop_vm_state{name="broken",namespace="dev",state="Stopped"} 0
vmop_vm_state{name="broken",namespace="dev",state="Unknown"} 0
vmop_vm_metrics_errors 1
`)
			require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "vmop_vm_state", "vmop_vm_metrics_errors"))
			require.Equal(t, 0, testutil.CollectAndCount(c, "vmop_vm_cpus"), "nothing from an unreadable status")
		})
	}
}

// A RAM quantity that does not parse leaves only vmop_vm_ram_bytes out.
func TestUnreadableRAM(t *testing.T) {
	bad := vm(t, webVM)
	require.NoError(t, unstructured.SetNestedField(bad.Object, "lots", "status", "ram"))
	c := New(static(bad))
	want := exposition(`
vmop_vm_state{name="web",namespace="prod",state="Starting"} 0
vmop_vm_state{name="web",namespace="prod",state="Running"} 1
vmop_vm_state{name="web",namespace="prod",state="Stopping"} 0
vmop_vm_state{name="web",namespace="prod",state="Stopped"} 0
vmop_vm_state{name="web",namespace="prod",state="Unknown"} 0
vmop_vm_cpus{name="web",namespace="prod"} 2
vmop_vm_metrics_errors 1
`)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want),
		"vmop_vm_state", "vmop_vm_cpus", "vmop_vm_ram_bytes", "vmop_vm_metrics_errors"))
}

// The fixed label sets cover what pkg/vmstatus derives from a pod, so
// that no phase or failure of today's operator shows as Unknown or Other.
func TestFixedSetsCoverVMStatus(t *testing.T) {
	running := func(phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: phase}}
	}
	deleting := running(corev1.PodRunning)
	deleting.DeletionTimestamp = &metav1.Time{}
	waiting := func(reason string) *corev1.Pod {
		p := running(corev1.PodPending)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: render.ContainerRunner,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
		return p
	}
	refused := running(corev1.PodRunning)
	refused.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: render.ContainerRunner,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: runnerconfig.ExitQemuRefused}}}}
	unschedulable := running(corev1.PodPending)
	unschedulable.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	noAgent := unschedulable.DeepCopy()
	noAgent.Status.Conditions[0].Message = "0/1 nodes are available: 1 Insufficient " + nodeagent.Resource + "."

	cases := []struct {
		pod  *corev1.Pod
		want bool
	}{
		{nil, false}, {nil, true}, {running(corev1.PodRunning), true}, {running(corev1.PodPending), true},
		{running(corev1.PodPending), false}, {deleting, true},
		{waiting("ErrImagePull"), true}, {waiting("CreateContainerError"), true}, {waiting("CrashLoopBackOff"), true},
		{refused, true}, {unschedulable, true}, {noAgent, true},
	}
	seenStates, seenReasons := map[string]bool{}, map[string]bool{}
	for _, tc := range cases {
		c := vmstatus.FromPod(tc.pod, tc.want, "")
		require.Contains(t, states, c.Running.Reason)
		require.Contains(t, failureReasons, c.Failed.Reason)
		seenStates[c.Running.Reason], seenReasons[c.Failed.Reason] = true, true
	}
	require.Len(t, seenStates, len(states)-1, "every state but Unknown occurs")
	require.Len(t, seenReasons, 7, "NoFailure and the six pod failures occur")
}
