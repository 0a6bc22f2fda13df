package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// apiAwayFor is how long the API server and etcd are away.
const apiAwayFor = time.Minute

// TestAPIServerAway takes the API server and etcd away for a minute under
// a running VM, then SIGKILLs vm-operator in the middle of a live change.
// Away means stopped with SIGSTOP (testcluster's Away): every client, the
// kubelet, the runner and the operator among them, hangs on its requests
// as on a control plane the network cut off, and nothing the servers hold
// is lost. The VM keeps running meanwhile, and each change lands once,
// whole, when the control plane or the operator is back.
func TestAPIServerAway(t *testing.T) {
	const ns, vm = "apiaway", "guest"
	installVmop(t)
	createNamespace(t, ns)
	addGuestDisk(t, ns, vm, recordWriter()...)
	addImageRepository(t, ns) // for its empty CD drive
	manifest, records := withRecordsDisk(t, ns, vm, fmt.Sprintf(guestVM, vm, ns))
	kubectl(t, manifest, "apply", "-f", "-")
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	waitConsole(t, ns, vm, testguest.ReadyLine, 2*time.Minute)
	runner, err := runnerPID(t.Context(), ns, vm)
	require.NoError(t, err)
	qemu := qemuPID(t, runner)
	require.Equal(t, []int{1}, guestCPULines(t, ns, vm))

	// The control plane away: from here until Back, only /proc tells.
	before := ackedRecords(t, ns, vm)
	require.NoError(t, node.Away())
	away := time.Now()
	back := false
	t.Cleanup(func() {
		if !back {
			// Whatever failed, the tests after this one need a cluster.
			_ = node.Back(context.Background(), 2*time.Minute)
		}
	})
	qemuTicks := procTicks(t, qemu)
	runnerStart, qemuStart := procStart(t, runner), procStart(t, qemu)
	for time.Since(away) < apiAwayFor {
		time.Sleep(5 * time.Second)
		require.Equal(t, runnerStart, procStart(t, runner), "the runner (pid %d) is gone %v after the API server went away", runner, time.Since(away).Round(time.Second))
		require.Equal(t, qemuStart, procStart(t, qemu), "qemu (pid %d) is gone %v after the API server went away", qemu, time.Since(away).Round(time.Second))
	}
	ran := time.Since(away)
	require.Greater(t, procTicks(t, qemu), qemuTicks, "qemu used no CPU time while the API server was away: the guest does not run")
	log, err := runnerConsole(runner, vm)
	require.NoError(t, err)
	acked := testguest.AckedRecords(log)
	require.Greater(t, acked, before, "the guest wrote no record while the API server was away")
	require.NoError(t, node.Back(t.Context(), time.Minute))
	back = true
	returned := time.Now()
	t.Logf("api server away: the VM ran %v with the API server and etcd stopped (same runner pid %d, qemu pid %d, which kept running)",
		ran.Round(time.Second), runner, qemu)

	// A live change made right after the return.
	eventually.Succeeds(t, time.Minute, func() error {
		_, errOut, err := kubectlResult(t.Context(), "", "vm", "set", "-n", ns, vm, "--cpus", "2")
		if err != nil {
			return fmt.Errorf("kubectl vm set --cpus 2: %w: %s", err, errOut)
		}
		return nil
	})
	waitGuestCPUs(t, ns, vm, 2, 2*time.Minute)
	t.Logf("api server away: %v from the API server's return to the guest seeing 2 CPUs", time.Since(returned).Round(time.Millisecond))
	eventually.Within(t, 2*time.Minute, func() string {
		n, err := node.Client.CoreV1().Nodes().Get(t.Context(), testnode.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if err := testnode.Schedulable(n); err != nil {
			return "node: " + err.Error()
		}
		return ""
	})
	t.Logf("api server away: the node Ready and untainted, seen %v after the API server's return (checked once the change had landed)", time.Since(returned).Round(time.Millisecond))
	requireRunningStatus(t, ns, vm, 2)
	t.Logf("api server away: the VM's status Running with 2 CPUs, seen %v after the API server's return", time.Since(returned).Round(time.Millisecond))
	require.Equal(t, []int{1, 2}, guestCPULines(t, ns, vm), "the guest's CPU counts")
	requireCPUsChanged(t, ns, vm, 1)
	requireSameRunner(t, ns, vm, runner)
	// Not a requirement: the operator gives up when it cannot renew its
	// Lease (it may not act while another replica could lead), and the
	// kubelet starts it again.
	t.Logf("api server away: vm-operator restarts so far: %d", operatorRestarts(t))

	t.Run("operator killed mid-change", func(t *testing.T) {
		kubectl(t, "", "rollout", "status", "-n", "vmop-system", "deployment/vm-operator", "--timeout", "3m")
		operator := operatorPID(t)
		since := time.Now()
		kubectl(t, "", "vm", "set", "-n", ns, vm, "--cpus", "1")
		require.NoError(t, syscall.Kill(operator, syscall.SIGKILL))
		waitGuestCPUs(t, ns, vm, 1, 3*time.Minute)
		t.Logf("api server away: the change reached the guest %v after kubectl vm set, with the operator SIGKILLed just after it",
			time.Since(since).Round(time.Millisecond))
		eventually.Within(t, 3*time.Minute, func() string {
			pid, err := runningOperator(t.Context())
			if err != nil {
				return err.Error()
			}
			if pid == operator {
				return fmt.Sprintf("vm-operator still runs as pid %d, which got SIGKILL", pid)
			}
			return ""
		})
		requireRunningStatus(t, ns, vm, 1)
		require.Equal(t, []int{1, 2, 1}, guestCPULines(t, ns, vm), "the guest's CPU counts")
		requireCPUsChanged(t, ns, vm, 2)
		requireSameRunner(t, ns, vm, runner)
		t.Logf("api server away: vm-operator restarts in all: %d", operatorRestarts(t))
	})
	all := requireRecordsKept(t, ns, vm, records, acked)
	t.Logf("api server away: the guest wrote records %d to %d while it was away, %d in all, 0 lost", before+1, acked, all)

	deleteVM(t, ns, vm)
}

// requireRunningStatus waits until the runner reports again: the VM's
// status says Running with cpus CPUs on this node, as kubectl vm status
// shows it.
func requireRunningStatus(t testing.TB, ns, vm string, cpus int) {
	t.Helper()
	eventually.Within(t, 2*time.Minute, func() string {
		s := vmStatus(t, ns, vm)
		if int(s.CPUs) != cpus || s.Node != testnode.Name || s.RAM != "512Mi" {
			return fmt.Sprintf("status: cpus %d, ram %q, node %q", s.CPUs, s.RAM, s.Node)
		}
		out := kubectl(t, "", "vm", "status", "-n", ns, vm)
		if !strings.Contains(out, "Running") || !strings.Contains(out, testnode.Name) {
			return "kubectl vm status:\n" + out
		}
		return ""
	})
}

// requireCPUsChanged waits until the VM has want CPUsChanged events and
// then requires that there are no more: each change landed once.
func requireCPUsChanged(t testing.TB, ns, vm string, want int) {
	t.Helper()
	count := func() (int, []string) {
		out := kubectl(t, "", "get", "events", "-n", ns, "-o", "json", "--field-selector",
			"involvedObject.kind=VirtualMachine,involvedObject.name="+vm+",reason=CPUsChanged")
		var list corev1.EventList
		require.NoError(t, json.Unmarshal([]byte(out), &list))
		n := 0
		var msgs []string
		for _, e := range list.Items {
			c := max(int(e.Count), 1)
			if e.Series != nil {
				c = max(c, int(e.Series.Count))
			}
			n += c
			msgs = append(msgs, fmt.Sprintf("%dx %s", c, e.Message))
		}
		return n, msgs
	}
	eventually.Within(t, time.Minute, func() string {
		if n, msgs := count(); n < want {
			return fmt.Sprintf("%d CPUsChanged events, want %d: %q", n, want, msgs)
		}
		return ""
	})
	// A second landing would follow the first closely.
	time.Sleep(5 * time.Second)
	n, msgs := count()
	require.Equal(t, want, n, "CPUsChanged events: %q", msgs)
}

// requireSameRunner requires that the VM's pod still runs the runner of
// pid, never restarted.
func requireSameRunner(t testing.TB, ns, vm string, pid int) {
	t.Helper()
	now, err := runnerPID(t.Context(), ns, vm)
	require.NoError(t, err)
	require.Equal(t, pid, now, "the runner's pid")
	pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-0", metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range pod.Status.ContainerStatuses {
		require.Zero(t, c.RestartCount, "restarts of container %s", c.Name)
	}
}

// guestCPULines are the CPU counts the guest printed, in order: one at
// boot, then one per change it saw.
func guestCPULines(t testing.TB, ns, vm string) []int {
	t.Helper()
	log, err := consoleLog(t.Context(), ns, vm)
	require.NoError(t, err)
	var counts []int
	for _, l := range strings.Split(log, "\n") {
		if _, s, ok := strings.Cut(l, testguest.CPUsPrefix); ok {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			require.NoError(t, err, "console line %q", l)
			counts = append(counts, n)
		}
	}
	return counts
}

// waitGuestCPUs waits until the guest's last CPU count is n.
func waitGuestCPUs(t testing.TB, ns, vm string, n int, timeout time.Duration) {
	t.Helper()
	eventually.Within(t, timeout, func() string {
		counts := guestCPULines(t, ns, vm)
		if len(counts) > 0 && counts[len(counts)-1] == n {
			return ""
		}
		return fmt.Sprintf("the guest's CPU counts are %v, want %d last", counts, n)
	})
}

// operatorPID is the host pid of vm-operator in its running pod.
func operatorPID(t testing.TB) int {
	t.Helper()
	pid, err := runningOperator(t.Context())
	require.NoError(t, err)
	return pid
}

// runningOperator is the host pid of vm-operator in its running pod, as
// the kubelet last reported it.
func runningOperator(ctx context.Context) (int, error) {
	pods, err := node.Client.CoreV1().Pods("vmop-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vm-operator"})
	if err != nil {
		return 0, err
	}
	var ids []string
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil && c.Ready && c.ContainerID != "" {
				ids = append(ids, strings.TrimPrefix(c.ContainerID, "containerd://"))
			}
		}
	}
	if len(ids) != 1 {
		return 0, fmt.Errorf("%d running and ready vm-operator containers, want 1", len(ids))
	}
	return node.Containerd.PID(ctx, ids[0])
}

// operatorRestarts is how often the kubelet restarted vm-operator.
func operatorRestarts(t testing.TB) int32 {
	t.Helper()
	pods, err := node.Client.CoreV1().Pods("vmop-system").List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vm-operator"})
	require.NoError(t, err)
	var n int32
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			n += c.RestartCount
		}
	}
	return n
}

// procStat are the fields of /proc/pid/stat after the command's name: the
// state is the first (field 3), start time the 20th (field 22).
func procStat(t testing.TB, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err, "process %d", pid)
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	require.GreaterOrEqual(t, len(fields), 20, "/proc/%d/stat: %s", pid, s)
	require.NotContains(t, []string{"Z", "X", "T", "t"}, fields[0], "state of process %d", pid)
	return fields
}

// procStart is when process pid started, which tells it from a later one
// with the same pid.
func procStart(t testing.TB, pid int) string { return procStat(t, pid)[19] }

// procTicks is the CPU time process pid used, in clock ticks.
func procTicks(t testing.TB, pid int) int {
	t.Helper()
	f := procStat(t, pid)
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return utime + stime
}
