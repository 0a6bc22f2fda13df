package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/procmem"
	"github.com/vmop/vmop/test/harness/testguest"
)

// startVMs is how many VMs BenchmarkStart starts, one after the other:
// the node has room for one test VM's CPUs at a time.
const startVMs = 5

// BenchmarkStart measures kubectl apply of a Running VM to qemu running in
// its pod on the real node, median over startVMs VMs, and its parts:
// until the pod exists (operator and StatefulSet controller), its claims
// are bound (volume binding), it is bound to the node (scheduling), its
// container runs (kubelet, containerd, runc) and qemu runs (the runner's
// own start, from its log). Also the memory of one VM's pod beyond the
// guest's RAM: the runner, qemu without the guest's RAM, and the pause
// process; and that of a second VM whose NIC is on the pod's network
// (the runner's DHCP server, qemu's tap backend).
func BenchmarkStart(b *testing.B) {
	const ns = "bench"
	installVmop(b)
	createNamespace(b, ns)
	addImageRepository(b, ns)
	parts := map[string][]time.Duration{}
	var overhead, guest, podNetOverhead int64
	agentPID := nodeAgentPID(b)
	agentCPU := cpuTime(b, agentPID)
	for range b.N {
		for i := range startVMs {
			vm := fmt.Sprintf("vm%d", i)
			addGuestDisk(b, ns, vm)
			manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "state: Stopped", "state: Running", 1)
			if i == 1 {
				manifest = strings.Replace(manifest, "    disks:\n", "    networks:\n    - pod: {}\n    disks:\n", 1)
			}
			seen := watchStart(b, ns, vm)
			applied := time.Now()
			kubectl(b, manifest, "apply", "-f", "-")
			var running time.Time
			eventually.Within(b, 3*time.Minute, func() string {
				var ok bool
				if running, ok = runnerLogTime(b, ns, vm, "VM running", applied.Truncate(time.Millisecond)); ok {
					return ""
				}
				return "qemu of " + vm + " is not running"
			})
			t := seen()
			steps := []struct {
				name string
				at   time.Time
			}{{"pod", t.created}, {"bound", t.bound}, {"scheduled", t.scheduled}, {"container", t.started}, {"qemu", running}}
			prev := applied
			for _, s := range steps {
				if s.at.IsZero() {
					b.Fatalf("%s: no time for %s", vm, s.name)
				}
				parts[s.name] = append(parts[s.name], s.at.Sub(prev))
				prev = s.at
			}
			parts["total"] = append(parts["total"], running.Sub(applied))
			// The node agent's part of it: devices, and the pod network for
			// vm1 (which a privileged runner made itself in
			// BenchmarkSetup's time, pkg/podnet).
			answer := "agent-devices"
			if i == 1 {
				answer = "agent-pod-network"
			}
			parts[answer] = append(parts[answer], runnerLogDuration(b, ns, vm, "Node agent answered", "took"))
			// Booted, the guest powers off at once when deleted (before, it
			// would ignore ACPI and take the whole powerdownTimeout), and
			// the pod's memory is what a running VM's is.
			waitConsole(b, ns, vm, testguest.ReadyLine, 2*time.Minute)
			switch i {
			case 0:
				overhead, guest = podMemory(b, ns, vm)
			case 1:
				podNetOverhead, _ = podMemory(b, ns, vm)
			}
			deleteVM(b, ns, vm)
		}
	}
	b.ReportMetric(float64((cpuTime(b, agentPID)-agentCPU).Milliseconds())/float64(b.N*startVMs), "ms-agent-cpu/vm")
	agentRSS, err := procmem.RSS(agentPID)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(agentRSS>>20), "MiB-agent-rss")
	for name, d := range parts {
		b.ReportMetric(float64(median(d).Milliseconds()), "ms-"+name)
	}
	b.ReportMetric(float64(overhead>>20), "MiB-pod-overhead")
	b.ReportMetric(float64(guest>>20), "MiB-guest-resident")
	b.ReportMetric(float64(podNetOverhead>>20), "MiB-pod-overhead-pod-network")
}

// nodeAgentPID is the host pid of vm-node on the node.
func nodeAgentPID(b testing.TB) int {
	pods, err := node.Client.CoreV1().Pods("vmop-system").List(b.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vm-node"})
	if err != nil || len(pods.Items) != 1 || len(pods.Items[0].Status.ContainerStatuses) == 0 {
		b.Fatalf("no vm-node pod: %v", err)
	}
	pid, err := node.Containerd.PID(b.Context(), strings.TrimPrefix(pods.Items[0].Status.ContainerStatuses[0].ContainerID, "containerd://"))
	if err != nil {
		b.Fatal(err)
	}
	return pid
}

// cpuTime is the user and system CPU time a process used so far.
func cpuTime(b testing.TB, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line, in clock ticks (100 Hz).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// runnerLogDuration is the duration attribute attr of the runner's log
// line msg.
func runnerLogDuration(b testing.TB, ns, vm, msg, attr string) time.Duration {
	for _, v := range runnerLogAttrs(b, ns, vm, msg, attr) {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	b.Fatalf("no %s=DURATION in the runner's log line %q of %s/%s", attr, msg, ns, vm)
	return 0
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// startTimes are when a VM's pod was first seen created, with its claims
// bound, on the node, and with its container running.
type startTimes struct{ created, bound, scheduled, started time.Time }

// watchStart watches the VM's pod and claims; the returned function tells
// what it saw so far.
func watchStart(b testing.TB, ns, vm string) func() startTimes {
	ctx, cancel := context.WithCancel(b.Context())
	b.Cleanup(cancel)
	pods, err := node.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + vm + "-0"})
	if err != nil {
		b.Fatal(err)
	}
	claims, err := node.Client.CoreV1().PersistentVolumeClaims(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var t startTimes
	bound := map[string]bool{}
	go func() {
		for {
			select {
			case ev := <-pods.ResultChan():
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok || ev.Type == watch.Deleted {
					continue
				}
				now := time.Now()
				mu.Lock()
				if t.created.IsZero() {
					t.created = now
				}
				if t.scheduled.IsZero() && pod.Spec.NodeName != "" {
					t.scheduled = now
				}
				for _, c := range pod.Status.ContainerStatuses {
					if t.started.IsZero() && c.State.Running != nil {
						t.started = now
					}
				}
				mu.Unlock()
			case ev := <-claims.ResultChan():
				pvc, ok := ev.Object.(*corev1.PersistentVolumeClaim)
				if !ok || !strings.HasSuffix(pvc.Name, "-"+vm+"-0") {
					continue
				}
				mu.Lock()
				if pvc.Status.Phase == corev1.ClaimBound {
					bound[pvc.Name] = true
				}
				// The runner's data and the system disk.
				if t.bound.IsZero() && len(bound) == 2 {
					t.bound = time.Now()
				}
				mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() startTimes {
		mu.Lock()
		defer mu.Unlock()
		return t
	}
}

// podMemory returns the resident memory of the VM's pod beyond the
// guest's RAM (the runner and its children, qemu without the mapping of
// the guest's RAM, and the pod's pause process), and the guest RAM's
// resident part.
func podMemory(b testing.TB, ns, vm string) (overhead, guest int64) {
	runner, err := runnerPID(b.Context(), ns, vm)
	if err != nil {
		b.Fatal(err)
	}
	// One containerd shim runs a pod's sandbox and containers: the
	// runner's parent, and the pause process's.
	tree := processTree()
	pause := 0
	for _, pid := range children(tree, tree[runner]) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "pause" {
			pause = pid
		}
	}
	if pause == 0 {
		b.Fatal("no pause process beside the runner")
	}
	ramBytes := int64(512 << 20) // guestVM's maximumRam
	for _, pid := range append(descendants(tree, runner), pause) {
		q, err := procmem.ReadQemu(pid, ramBytes)
		if err != nil {
			b.Fatal(err)
		}
		overhead += q.Beyond(true)
		guest += q.Guest
	}
	return overhead, guest
}

// processTree maps each process to its parent.
func processTree() map[int]int {
	parents := map[int]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
		parents[pid] = ppid
	}
	return parents
}

// children returns the processes whose parent is pid.
func children(tree map[int]int, pid int) []int {
	var out []int
	for c, p := range tree {
		if p == pid {
			out = append(out, c)
		}
	}
	return out
}

// descendants returns pid and every process below it.
func descendants(tree map[int]int, pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children(tree, out[i])...)
	}
	return out
}
