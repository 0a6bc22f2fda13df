package reporter

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/kubeapi"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/test/harness/syncbuffer"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/vmtest"
)

const gib = 1 << 30

// testOptions keep the real settle time (the burst test measures it) but
// retry sooner.
func testOptions() options {
	o := defaultOptions
	o.minBackoff = 50 * time.Millisecond
	o.maxBackoff = 500 * time.Millisecond
	return o
}

// env is what the subtests share: one cluster.
type env struct {
	t   *testing.T
	cfg *kubeapi.Config
	dyn dynamic.Interface
	cs  *kubernetes.Clientset
}

// guest is what a Debian guest's agent tells.
var guest = guestagent.Info{
	AgentVersion: "7.2.15", Hostname: "desk",
	OS: v1.OSInfo{ID: "debian", PrettyName: "Debian GNU/Linux 12 (bookworm)", VersionID: "12"},
	Interfaces: []guestagent.Interface{
		{Name: "lo", IPAddresses: []guestagent.IPAddress{{Type: "ipv4", Address: "127.0.0.1", Prefix: 8}}},
		{Name: "eth0", HardwareAddress: "52:54:00:12:34:56", IPAddresses: []guestagent.IPAddress{
			{Type: "ipv4", Address: "10.0.2.15", Prefix: 24},
			{Type: "ipv6", Address: "fec0::5054:ff:fe12:3456", Prefix: 64},
		}},
	},
}

func TestReporter(t *testing.T) {
	c := vmtest.NewCluster(t)
	ctx := t.Context()
	e := &env{t: t, cfg: c.APIConfig, dyn: c.Dyn}
	var err error
	e.cs, err = kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)

	t.Run("status fields appear and Stop writes the final state", func(t *testing.T) {
		e.createVM(t, "default", "fields")
		logs := &logBuffer{}
		r := e.reporter(t, e.cfg, "default", "fields", logs, testOptions())
		r.Report(ctx, runner.Status{
			Running: true, CPUs: 2, RAM: 4 * gib, Accelerator: "tcg", ConsoleClient: "192.168.1.20",
			DisplayPasswordSerial: 3, RestartRequired: []string{"maximumCpus", "firmware"},
		})
		st := e.waitStatus(t, "default", "fields", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 2 })
		require.Equal(t, "4Gi", st.RAM)
		require.Equal(t, "tcg", st.Accelerator)
		require.Equal(t, "192.168.1.20", st.ConsoleClient)
		require.EqualValues(t, 3, st.DisplayPasswordSerial)
		require.Equal(t, version.Get(), st.RunnerVersion)
		gen := e.getVM(t, "default", "fields").GetGeneration()
		booted := condition(t, st, v1.ConditionBooted)
		require.Equal(t, metav1.ConditionFalse, booted.Status)
		require.Equal(t, ReasonGuestAgentNotConnected, booted.Reason)
		require.Equal(t, gen, booted.ObservedGeneration)
		require.Equal(t, metav1.ConditionTrue, condition(t, st, v1.ConditionMediaLoaded).Status)
		require.Equal(t, v1.ReasonNotPaused, condition(t, st, v1.ConditionPaused).Reason)
		// Running and RestartRequired are the operator's conditions.
		require.Len(t, st.Conditions, 3)

		// A full disk pauses the guest: the condition names the disk by
		// its field and says what to do; the resume clears it.
		full := &runner.DiskPause{Drive: "disk1", Index: 2, NoSpace: true, Err: "No space left on device"}
		r.Report(ctx, runner.Status{Running: true, CPUs: 2, RAM: 4 * gib, DiskPause: full})
		st = e.waitStatus(t, "default", "fields", func(st *v1.VirtualMachineStatus) bool {
			return condition(t, st, v1.ConditionPaused).Status == metav1.ConditionTrue
		})
		paused := condition(t, st, v1.ConditionPaused)
		require.Equal(t, v1.ReasonDiskFull, paused.Reason)
		require.Contains(t, paused.Message, "disk disk1 (spec.vm.disks[2]) is full (No space left on device)")
		require.Contains(t, paused.Message, "free space on its volume or grow its claim")
		r.Report(ctx, runner.Status{Running: true, CPUs: 2, RAM: 4 * gib, Accelerator: "tcg", ConsoleClient: "192.168.1.20",
			DisplayPasswordSerial: 3, RestartRequired: []string{"maximumCpus", "firmware"}})
		e.waitStatus(t, "default", "fields", func(st *v1.VirtualMachineStatus) bool {
			return condition(t, st, v1.ConditionPaused).Status == metav1.ConditionFalse
		})

		// A boot that takes too long says so, and what to look at.
		r.Report(ctx, runner.Status{Running: true, CPUs: 2, RAM: 4 * gib, BootOverdue: 10 * time.Minute})
		st = e.waitStatus(t, "default", "fields", func(st *v1.VirtualMachineStatus) bool {
			return condition(t, st, v1.ConditionBooted).Reason == ReasonBootOverdue
		})
		booted = condition(t, st, v1.ConditionBooted)
		require.Equal(t, metav1.ConditionFalse, booted.Status)
		require.Contains(t, booted.Message, "has not connected in the 10m0s since the guest started")
		require.Contains(t, booted.Message, "kubectl vm console shows its screen")

		// The runner's fields belong to its field manager, on the status.
		var owned bool
		for _, mf := range e.getVM(t, "default", "fields").GetManagedFields() {
			owned = owned || mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "status"
		}
		require.True(t, owned, "no apply entry of %s on the status", FieldManager)

		// Booted, restart done; the console client leaves.
		r.Report(ctx, runner.Status{Running: true, Booted: true, CPUs: 2, RAM: 4 * gib, DisplayPasswordSerial: 3, Guest: guest})
		st = e.waitStatus(t, "default", "fields", func(st *v1.VirtualMachineStatus) bool {
			return condition(t, st, v1.ConditionBooted).Status == metav1.ConditionTrue
		})
		require.Empty(t, st.ConsoleClient)
		require.Equal(t, ReasonGuestAgentConnected, condition(t, st, v1.ConditionBooted).Reason)
		// What the agent told; loopback left out.
		require.Equal(t, "7.2.15", st.GuestAgentVersion)
		require.Equal(t, "desk", st.Hostname)
		require.Equal(t, []v1.GuestInterface{{Name: "eth0", MAC: "52:54:00:12:34:56", IPAddresses: []string{"10.0.2.15/24", "fec0::5054:ff:fe12:3456/64"}}}, st.Interfaces)
		require.JSONEq(t, `{"id": "debian", "pretty-name": "Debian GNU/Linux 12 (bookworm)", "version-id": "12"}`, string(st.OSInfo.Raw))
		require.Equal(t, ReasonMediaLoaded, condition(t, st, v1.ConditionMediaLoaded).Reason)

		// A CD medium that cannot be opened, one that waits for the tray.
		r.Report(ctx, runner.Status{Running: true, Booted: true, CPUs: 2, CDProblems: []runner.CDProblem{
			{Drive: "cd0", Index: 1, Image: "/var/local/vmop-image-repository/gone.iso", Err: "Could not open '/var/local/vmop-image-repository/gone.iso': No such file or directory"},
			{Drive: "cd1", Index: 2, Image: "/var/local/vmop-image-repository/b.iso"},
		}})
		st = e.waitStatus(t, "default", "fields", func(st *v1.VirtualMachineStatus) bool {
			return condition(t, st, v1.ConditionMediaLoaded).Status == metav1.ConditionFalse
		})
		media := condition(t, st, v1.ConditionMediaLoaded)
		require.Equal(t, ReasonMediumFailed, media.Reason)
		require.Equal(t, `CD drive cd0 (spec.vm.disks[1].cdrom.image) is empty: "/var/local/vmop-image-repository/gone.iso" cannot be opened: `+
			`Could not open '/var/local/vmop-image-repository/gone.iso': No such file or directory (the VM runs without it; fix the image or change the field to try again); `+
			`CD drive cd1 (spec.vm.disks[2].cdrom.image): the change to "/var/local/vmop-image-repository/b.iso" waits for the guest to release the tray (unmount or eject the CD in the guest).`, media.Message)

		// Stop flushes a stopped VM before it returns.
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(stopCtx))
		st = e.status(t, "default", "fields")
		require.Equal(t, metav1.ConditionFalse, condition(t, st, v1.ConditionBooted).Status)
		require.EqualValues(t, 2, st.CPUs)
		require.Empty(t, st.Hostname, "a stopped guest has no agent to tell")
		require.Empty(t, st.Interfaces)
		require.Nil(t, st.OSInfo)
		require.NoError(t, r.Stop(stopCtx), "a second Stop")
		require.Zero(t, logs.count("level=WARN"), logs.String())
	})

	t.Run("bursts coalesce and unchanged status is not written", func(t *testing.T) {
		e.createVM(t, "default", "burst")
		cfg, counts := counting(e.cfg)
		r := e.reporter(t, cfg, "default", "burst", nil, testOptions())
		statusPatches := func() int {
			return counts.get("PATCH /apis/vmoperator.jdrupes.org/v1/namespaces/default/vms/burst/status")
		}

		// A tight burst.
		for i := range 100 {
			r.Report(ctx, runner.Status{Running: true, CPUs: i + 1, RAM: gib})
		}
		e.waitStatus(t, "default", "burst", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 100 })
		time.Sleep(300 * time.Millisecond) // would show late writes
		tight := statusPatches()
		t.Logf("100 reports at once: %d status writes", tight)
		require.LessOrEqual(t, tight, 2)
		require.EqualValues(t, 100, e.status(t, "default", "burst").CPUs)

		// The same status again: nothing to write.
		for range 20 {
			r.Report(ctx, runner.Status{Running: true, CPUs: 100, RAM: gib})
		}
		time.Sleep(300 * time.Millisecond)
		require.Equal(t, tight, statusPatches(), "unchanged status was written")

		// A burst spread over about half a second: about one write per
		// settle time.
		start := time.Now()
		for i := range 100 {
			r.Report(ctx, runner.Status{Running: true, CPUs: 101 + i, RAM: 2 * gib})
			time.Sleep(5 * time.Millisecond)
		}
		elapsed := time.Since(start)
		st := e.waitStatus(t, "default", "burst", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 200 })
		require.Equal(t, "2Gi", st.RAM)
		time.Sleep(300 * time.Millisecond)
		spread := statusPatches() - tight
		t.Logf("100 reports over %v: %d status writes; requests in all: %v", elapsed.Round(time.Millisecond), spread, counts.snapshot())
		require.LessOrEqual(t, spread, int(elapsed/defaultOptions.settle)+2)
		require.Equal(t, 1, counts.get("GET /apis/vmoperator.jdrupes.org/v1/namespaces/default/vms/burst"), "the VM is read once")
	})

	t.Run("lastTransitionTime changes only when the status flips", func(t *testing.T) {
		e.createVM(t, "default", "flips")
		clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
		opts := testOptions()
		opts.now = clock.Now
		r := e.reporter(t, e.cfg, "default", "flips", nil, opts)
		t0 := clock.Now()
		r.Report(ctx, runner.Status{Running: true, CPUs: 1})
		st := e.waitStatus(t, "default", "flips", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 1 })
		requireLTT(t, st, v1.ConditionBooted, t0)

		t1 := clock.Add(time.Hour)
		r.Report(ctx, runner.Status{Running: true, Booted: true, CPUs: 2})
		st = e.waitStatus(t, "default", "flips", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 2 })
		requireLTT(t, st, v1.ConditionBooted, t1)

		clock.Add(time.Hour)
		r.Report(ctx, runner.Status{Running: true, Booted: true, CPUs: 3})
		st = e.waitStatus(t, "default", "flips", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 3 })
		requireLTT(t, st, v1.ConditionBooted, t1)

		// Stop flips Booted; a restarted runner keeps that time.
		t3 := clock.Add(time.Hour)
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(stopCtx))
		requireLTT(t, e.status(t, "default", "flips"), v1.ConditionBooted, t3)
		r2 := e.reporter(t, e.cfg, "default", "flips", nil, opts)
		clock.Add(time.Hour)
		r2.Report(ctx, runner.Status{Running: false, CPUs: 4})
		st = e.waitStatus(t, "default", "flips", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 4 })
		requireLTT(t, st, v1.ConditionBooted, t3)
	})

	t.Run("the operator's conditions and fields survive", func(t *testing.T) {
		e.createVM(t, "default", "shared")
		vms := e.dyn.Resource(v1.GroupVersionResource).Namespace("default")
		operatorApply := func(ready metav1.ConditionStatus) {
			t.Helper()
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1.APIVersion, "kind": v1.Kind,
				"metadata": map[string]any{"name": "shared", "namespace": "default"},
				"status": map[string]any{
					"node": "node-1",
					"conditions": []any{map[string]any{
						"type": "Ready", "status": string(ready), "reason": "Reconciled", "message": "",
						"lastTransitionTime": "2029-01-01T00:00:00Z",
					}},
				},
			}}
			_, err := vms.ApplyStatus(ctx, "shared", obj, metav1.ApplyOptions{FieldManager: "vm-operator"})
			require.NoError(t, err)
		}
		operatorApply(metav1.ConditionTrue)

		r := e.reporter(t, e.cfg, "default", "shared", nil, testOptions())
		r.Report(ctx, runner.Status{Running: true, CPUs: 1})
		st := e.waitStatus(t, "default", "shared", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 1 })
		require.Equal(t, metav1.ConditionTrue, condition(t, st, "Ready").Status)
		require.Equal(t, "node-1", st.Node)

		// The operator's next apply keeps the runner's conditions...
		operatorApply(metav1.ConditionFalse)
		st = e.status(t, "default", "shared")
		require.Equal(t, metav1.ConditionFalse, condition(t, st, "Ready").Status)
		require.Equal(t, metav1.ConditionFalse, condition(t, st, v1.ConditionBooted).Status)
		require.EqualValues(t, 1, st.CPUs)

		// ...and the runner's next one the operator's.
		r.Report(ctx, runner.Status{Running: true, CPUs: 2})
		st = e.waitStatus(t, "default", "shared", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 2 })
		require.Equal(t, metav1.ConditionFalse, condition(t, st, "Ready").Status)
		require.Equal(t, "node-1", st.Node)
		require.Len(t, st.Conditions, 4) // Ready, Booted, MediaLoaded, Paused
	})

	t.Run("a missing VirtualMachine is looked up rarely and nothing is written", func(t *testing.T) {
		cfg, counts := counting(e.cfg)
		logs := &logBuffer{}
		r := e.reporter(t, cfg, "default", "ghost", logs, testOptions())
		for i := range 50 {
			r.Report(ctx, runner.Status{Running: true, CPUs: i})
		}
		time.Sleep(500 * time.Millisecond)
		require.Equal(t, map[string]int{"GET /apis/vmoperator.jdrupes.org/v1/namespaces/default/vms/ghost": 1}, counts.snapshot())
		require.Equal(t, 1, logs.count("No VirtualMachine"), logs.String())
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(stopCtx))
		// Neither a VirtualMachine nor a StatefulSet: an error, no panic.
		err := r.SetStopped(ctx)
		require.Error(t, err)
		require.True(t, kubeapi.IsStatus(err, http.StatusNotFound), "%v", err)
	})

	t.Run("a VirtualMachine created later gets the status", func(t *testing.T) {
		opts := testOptions()
		opts.absentRecheck = 300 * time.Millisecond
		logs := &logBuffer{}
		r := e.reporter(t, e.cfg, "default", "late", logs, opts)
		r.Report(ctx, runner.Status{Running: true, CPUs: 3})
		require.Eventually(t, func() bool { return logs.count("No VirtualMachine") == 1 }, 5*time.Second, 20*time.Millisecond)
		e.createVM(t, "default", "late")
		e.waitStatus(t, "default", "late", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 3 })
		require.Equal(t, 1, logs.count("exists now"), logs.String())
	})

	t.Run("SetStopped with a VirtualMachine sets spec.vm.state", func(t *testing.T) {
		e.createVM(t, "default", "stop-vm")
		e.createStatefulSet(t, "default", "stop-vm") // must stay untouched
		r := e.reporter(t, e.cfg, "default", "stop-vm", nil, testOptions())
		require.NoError(t, r.SetStopped(ctx))
		state, _, _ := unstructured.NestedString(e.getVM(t, "default", "stop-vm").Object, "spec", "vm", "state")
		require.Equal(t, "Stopped", state)
		require.EqualValues(t, 1, e.replicas(t, "default", "stop-vm"))
	})

	t.Run("SetStopped without a VirtualMachine scales the StatefulSet", func(t *testing.T) {
		e.createStatefulSet(t, "default", "stop-sts")
		r := e.reporter(t, e.cfg, "default", "stop-sts", nil, testOptions())
		require.NoError(t, r.SetStopped(ctx))
		require.EqualValues(t, 0, e.replicas(t, "default", "stop-sts"))
	})

	t.Run("forbidden requests are logged, not fatal", func(t *testing.T) {
		e.createVM(t, "default", "forbidden")
		cfg := testcluster.Impersonate(e.cfg, "nobody")
		logs := &logBuffer{}
		r := e.reporter(t, cfg, "default", "forbidden", logs, testOptions())
		r.Report(ctx, runner.Status{Running: true, CPUs: 1})
		require.Eventually(t, func() bool { return logs.count("forbidden") >= 2 }, 10*time.Second, 20*time.Millisecond,
			"retries with backoff: %s", logs.String())
		err := r.SetStopped(ctx)
		require.True(t, kubeapi.IsStatus(err, http.StatusForbidden), "%v", err)
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		require.Error(t, r.Stop(stopCtx))
		require.Empty(t, e.status(t, "default", "forbidden").Conditions)
	})

	t.Run("events regard the VirtualMachine, a repeat counts in a series, Stop writes the last", func(t *testing.T) {
		e.createVM(t, "default", "events")
		uid := e.getVM(t, "default", "events").GetUID()
		clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
		opts := testOptions()
		opts.now = clock.Now
		logs := &logBuffer{}
		r := e.reporter(t, e.cfg, "default", "events", logs, opts)
		t0 := clock.Now()
		started := runner.Event{Reason: runner.ReasonQemuStarted, Action: "Start", Message: "qemu runs the guest with the kvm accelerator"}
		missing := runner.Event{Warning: true, Reason: runner.ReasonMediumUnavailable, Action: "ChangeMedium", Message: "CD drive cd0 is empty"}
		r.Event(ctx, started)
		t1 := clock.Add(time.Second)
		r.Event(ctx, missing)
		evs := e.waitEvents(t, "default", "events", 2)
		require.Equal(t, corev1.ObjectReference{APIVersion: v1.APIVersion, Kind: v1.Kind, Namespace: "default", Name: "events", UID: uid}, evs[0].Regarding)
		require.Equal(t, &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "default", Name: "events-0"}, evs[0].Related)
		require.Equal(t, ReportingController, evs[0].ReportingController)
		require.Equal(t, "events-0", evs[0].ReportingInstance)
		require.Equal(t, []string{"Normal", "Start", runner.ReasonQemuStarted, started.Message}, []string{evs[0].Type, evs[0].Action, evs[0].Reason, evs[0].Note})
		require.Equal(t, []string{"Warning", "ChangeMedium", runner.ReasonMediumUnavailable, missing.Message}, []string{evs[1].Type, evs[1].Action, evs[1].Reason, evs[1].Note})
		require.True(t, t0.Equal(evs[0].EventTime.Time), "eventTime %v", evs[0].EventTime)
		require.Nil(t, evs[1].Series)

		// The same within the window: one Event with a series.
		var last time.Time
		for range 3 {
			last = clock.Add(time.Minute)
			r.Event(ctx, missing)
		}
		require.Eventually(t, func() bool {
			evs = e.events(t, "default", "events")
			return len(evs) == 2 && evs[1].Series != nil && evs[1].Series.Count == 4
		}, 10*time.Second, 20*time.Millisecond, "series of 4: %+v", evs)
		require.True(t, last.Equal(evs[1].Series.LastObservedTime.Time), "lastObservedTime %v", evs[1].Series.LastObservedTime)
		require.True(t, t1.Equal(evs[1].EventTime.Time), "eventTime stays the first's")

		// Later than the window, or with another message: new Events.
		clock.Add(seriesWindow)
		r.Event(ctx, missing)
		clock.Add(time.Second)
		r.Event(ctx, runner.Event{Warning: true, Reason: runner.ReasonMediumUnavailable, Action: "ChangeMedium", Message: "CD drive cd1 is empty"})
		e.waitEvents(t, "default", "events", 4)

		// Stop writes what was reported just before it.
		clock.Add(time.Second)
		r.Event(ctx, runner.Event{Reason: runner.ReasonShutdownCompleted, Action: "Shutdown", Message: "The guest shut down"})
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(stopCtx))
		evs = e.events(t, "default", "events")
		require.Len(t, evs, 5)
		require.Equal(t, runner.ReasonShutdownCompleted, evs[4].Reason)
		require.Zero(t, logs.count("level=WARN"), logs.String())
	})

	t.Run("GitOps mode: events regard the StatefulSet", func(t *testing.T) {
		e.createStatefulSet(t, "default", "gitops-events")
		r := e.reporter(t, e.cfg, "default", "gitops-events", nil, testOptions())
		r.Event(ctx, runner.Event{Reason: runner.ReasonGuestShutdown, Action: "Shutdown", Message: "The guest shut itself down"})
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(stopCtx))
		evs := e.events(t, "default", "gitops-events")
		require.Len(t, evs, 1)
		require.Equal(t, corev1.ObjectReference{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "default", Name: "gitops-events"}, evs[0].Regarding)
		require.Equal(t, "gitops-events-0", evs[0].ReportingInstance)
	})

	t.Run("an unreachable API server: events queue up to a bound, Stop gives up at its deadline", func(t *testing.T) {
		cfg := *e.cfg
		cfg.Server = "https://127.0.0.1:1" // nothing listens
		logs := &logBuffer{}
		r := e.reporter(t, &cfg, "default", "unreachable", logs, testOptions())
		const n = 100
		start := time.Now()
		for range n {
			r.Event(ctx, runner.Event{Reason: runner.ReasonQemuStarted, Action: "Start", Message: "started"})
		}
		require.Less(t, time.Since(start), time.Second, "Event does not wait for the API server")
		// The writer may have taken one off the queue already.
		dropped := logs.count("dropped one")
		require.True(t, dropped == n-eventQueue || dropped == n-eventQueue-1, "%d dropped", dropped)
		stopCtx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		require.Error(t, r.Stop(stopCtx))
		require.Eventually(t, func() bool { return logs.count("Event not written") == n-dropped }, 5*time.Second, 20*time.Millisecond,
			"each queued event is logged as lost: %s", logs.String())
	})

	t.Run("long notes are cut on a rune boundary", func(t *testing.T) {
		require.Equal(t, "abc", truncate("abc", 3))
		cut := truncate(strings.Repeat("ä", 600), noteLimit)
		require.LessOrEqual(t, len(cut), noteLimit)
		require.True(t, utf8.ValidString(cut))
		require.True(t, strings.HasSuffix(cut, "ä..."))
	})

	t.Run("the runner ClusterRole grants all the reporter needs", func(t *testing.T) {
		// As installed and bound by the operator; the admission policy
		// that limits a runner to its own VM is tested in pkg/install.
		const ns = "rbac"
		_, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		role, err := install.NewClusterRole(install.RunnerClusterRole)
		require.NoError(t, err)
		_, err = e.cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		require.NoError(t, err)
		account, binding := install.RunnerAccess(ns)
		_, err = e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, account, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = e.cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{})
		require.NoError(t, err)

		cfg := testcluster.Impersonate(e.cfg, "system:serviceaccount:"+ns+":"+account.Name)
		e.createVM(t, ns, "vm")
		e.createStatefulSet(t, ns, "gitops")
		// RBAC takes a moment to see a new binding.
		sa, err := kubeapi.New(cfg)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return sa.Get(ctx, "/apis/vmoperator.jdrupes.org/v1/namespaces/"+ns+"/vms/vm", nil) == nil
		}, 10*time.Second, 50*time.Millisecond)

		logs := &logBuffer{}
		r := e.reporter(t, cfg, ns, "vm", logs, testOptions())
		r.Report(ctx, runner.Status{Running: true, Booted: true, CPUs: 2, RAM: gib, ConsoleClient: "c", DisplayPasswordSerial: 1})
		e.waitStatus(t, ns, "vm", func(st *v1.VirtualMachineStatus) bool { return st.CPUs == 2 })
		require.NoError(t, r.SetStopped(ctx))
		shutdown := runner.Event{Reason: runner.ReasonGuestShutdown, Action: "Shutdown", Message: "The guest shut itself down"}
		r.Event(ctx, shutdown)
		r.Event(ctx, shutdown) // a series
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(stopCtx))
		evs := e.events(t, ns, "vm")
		require.Len(t, evs, 1)
		require.EqualValues(t, 2, evs[0].Series.Count)
		st := e.status(t, ns, "vm")
		require.Equal(t, metav1.ConditionFalse, condition(t, st, v1.ConditionBooted).Status)
		state, _, _ := unstructured.NestedString(e.getVM(t, ns, "vm").Object, "spec", "vm", "state")
		require.Equal(t, "Stopped", state)

		// GitOps mode: the VirtualMachine lookup is a 404, not a 403.
		gitops := e.reporter(t, cfg, ns, "gitops", logs, testOptions())
		gitops.Report(ctx, runner.Status{Running: true})
		require.Eventually(t, func() bool { return logs.count("No VirtualMachine") == 1 }, 5*time.Second, 20*time.Millisecond)
		require.NoError(t, gitops.SetStopped(ctx))
		require.EqualValues(t, 0, e.replicas(t, ns, "gitops"))
		gitops.Event(ctx, shutdown)
		require.NoError(t, gitops.Stop(stopCtx))
		require.Len(t, e.events(t, ns, "gitops"), 1)
		require.Zero(t, logs.count("level=WARN"), logs.String())
		require.Zero(t, logs.count("level=ERROR"), logs.String())
	})
}

func TestInClusterOutsideAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	r, err := InCluster("vm", nil)
	require.ErrorIs(t, err, ErrNotInCluster)
	require.Nil(t, r)
}

// reporter starts a Reporter that the test stops.
func (e *env) reporter(t *testing.T, cfg *kubeapi.Config, ns, name string, logs *logBuffer, opts options) *Reporter {
	t.Helper()
	if logs == nil {
		logs = &logBuffer{}
	}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := newReporter(cfg, ns, name, log, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = r.Stop(ctx)
		if t.Failed() {
			t.Logf("reporter log:\n%s", logs.String())
		}
	})
	return r
}

func (e *env) createVM(t *testing.T, ns, name string) {
	t.Helper()
	vm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.Kind,
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"vm": map[string]any{"state": "Running", "maximumCpus": int64(4)}},
	}}
	_, err := e.dyn.Resource(v1.GroupVersionResource).Namespace(ns).Create(t.Context(), vm, metav1.CreateOptions{})
	require.NoError(t, err)
}

func (e *env) getVM(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	vm, err := e.dyn.Resource(v1.GroupVersionResource).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return vm
}

func (e *env) status(t *testing.T, ns, name string) *v1.VirtualMachineStatus {
	t.Helper()
	var st v1.VirtualMachineStatus
	raw, _, err := unstructured.NestedMap(e.getVM(t, ns, name).Object, "status")
	require.NoError(t, err)
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st))
	return &st
}

// waitStatus polls the VM's status until ok.
func (e *env) waitStatus(t *testing.T, ns, name string, ok func(*v1.VirtualMachineStatus) bool) *v1.VirtualMachineStatus {
	t.Helper()
	var st *v1.VirtualMachineStatus
	deadline := time.Now().Add(10 * time.Second)
	for {
		st = e.status(t, ns, name)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of %s/%s not as expected: %+v", ns, name, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// events are the Events regarding the object name, oldest first.
func (e *env) events(t *testing.T, ns, name string) []eventsv1.Event {
	t.Helper()
	list, err := e.cs.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Name == name {
			out = append(out, ev)
		}
	}
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return out
}

// waitEvents waits until n Events regard name and returns them.
func (e *env) waitEvents(t *testing.T, ns, name string, n int) []eventsv1.Event {
	t.Helper()
	var evs []eventsv1.Event
	require.Eventually(t, func() bool {
		evs = e.events(t, ns, name)
		return len(evs) == n
	}, 10*time.Second, 20*time.Millisecond, "%d events regarding %s/%s", n, ns, name)
	return evs
}

func (e *env) createStatefulSet(t *testing.T, ns, name string) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/instance": name}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "vm-runner"}}},
			},
		},
	}
	_, err := e.cs.AppsV1().StatefulSets(ns).Create(t.Context(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
}

func (e *env) replicas(t *testing.T, ns, name string) int32 {
	t.Helper()
	sts, err := e.cs.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return *sts.Spec.Replicas
}

func condition(t *testing.T, st *v1.VirtualMachineStatus, typ string) metav1.Condition {
	t.Helper()
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	t.Fatalf("no condition %s in %+v", typ, st.Conditions)
	return metav1.Condition{}
}

func requireLTT(t *testing.T, st *v1.VirtualMachineStatus, typ string, want time.Time) {
	t.Helper()
	got := condition(t, st, typ).LastTransitionTime.Time
	require.True(t, want.Equal(got), "%s: lastTransitionTime %v, want %v", typ, got.UTC(), want.UTC())
}

// counting returns a copy of cfg whose requests are counted by method
// and path.
func counting(cfg *kubeapi.Config) (*kubeapi.Config, *requestCounts) {
	counts := &requestCounts{n: map[string]int{}}
	return testcluster.WrapTransport(cfg, func(req *http.Request) { counts.add(req.Method + " " + req.URL.Path) }), counts
}

type requestCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *requestCounts) add(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[k]++
}

func (c *requestCounts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

func (c *requestCounts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for k, v := range c.n {
		m[k] = v
	}
	return m
}

// logBuffer collects log output from the reporter's goroutine.
type logBuffer struct{ syncbuffer.Buffer }

func (b *logBuffer) count(s string) int { return strings.Count(b.String(), s) }

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock on and returns the new time.
func (c *fakeClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
