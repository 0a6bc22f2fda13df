package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/vmpod"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/procmem"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

// scaleVM is what the scale benchmark creates thousands of: stopped, with
// SPICE (its display Secret is generated when it is started) and a disk.
const scaleVM = `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  nodeName: node-1
  vm:
    maximumCpus: 2
    maximumRam: 1Gi
    disks:
    - volumeClaimTemplate:
        metadata: {name: system}
        spec:
          resources: {requests: {storage: 1Gi}}
    display:
      spice: {}
`

// scale is one size of BenchmarkScale: its VMs spread over nodes and
// namespaces of 100 VMs each.
type scale struct{ vms, nodes int }

func (s scale) namespaces() int { return max(1, s.vms/100) }

// vm is the namespace, name and node of the scale's VM i.
func (s scale) vm(i int) (ns, name, node string) {
	return fmt.Sprintf("scale-%03d", i%s.namespaces()), fmt.Sprintf("vm-%05d", i), fmt.Sprintf("node-%d", 1+i%s.nodes)
}

// BenchmarkScale creates 1,000 VMs on 100 kwok nodes, and 10,000 on 1,000
// (KubeVirt's own density test runs 8,000), at once and then starts the
// operator, and measures until every VM has its objects and its status;
// then the writes per VM, the writes of two full resyncs (should be 0),
// the operator's peak RSS, the latency from a state change to the
// StatefulSet's new replicas (the operator's part) and to the status
// saying Running (with the controller manager and kwok), and `kubectl vm
// list -A` through the real kubectl. The VMs are created first because
// creating them (the API server validates each against the CRD's schema
// and CEL rules) takes as much of the 2 cores as reconciling them. Run it
// with -benchtime 1x: one round is the measurement. The bars are issue
// 39's: the operator's CPU per VM at 10,000 VMs no higher than at 1,000,
// its memory below 500 MiB (and below its Deployment's limit), a state
// change reaching the StatefulSet within 1 s at p99, the list in under 2
// s.
func BenchmarkScale(b *testing.B) {
	for _, s := range []scale{{vms: 1000, nodes: 100}, {vms: 10000, nodes: 1000}} {
		b.Run(fmt.Sprintf("%dVMs", s.vms), func(b *testing.B) { benchmarkScale(b, s) })
	}
}

// cpuPerVMAt1000 is the operator's CPU per VM in the 1,000-VM run, which
// a larger run of the same invocation must not exceed: per VM, its work
// must not grow with the cluster. (Issue 39 gave 4.5 ms for 1,000 VMs, as
// measured on the machine of its day; on these machines the operator of
// that day takes 8.7 ms.)
var cpuPerVMAt1000 float64

// cpuNoise is how much the CPU per VM varies between runs of one size:
// 9.4-11.5 ms in five runs at 1,000 VMs on 2026-11-30.
const cpuNoise = 0.15

func benchmarkScale(b *testing.B, s scale) {
	const changes = 100
	// The resync's pass over every VM (spread over half the period) must
	// fit in it many times over: 10 s for 1,000 VMs, 100 s for 10,000.
	resync := time.Duration(s.vms/100) * time.Second
	nodes := make([]string, s.nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%d", i+1)
	}
	e := newEnvWith(b, func(o *testcluster.Options) {
		o.Nodes = nodes
		o.ReadyTimeout = 5 * time.Minute
	})
	for _, n := range nodes[1:] {
		e.offerNodeAgent(n)
	}
	for i := range s.namespaces() {
		ns, _, _ := s.vm(i)
		e.namespace(ns, nil)
	}
	kubectl := e.kubectl(b)
	for b.Loop() {
		start := time.Now()
		createAll(b, e, s)
		b.ReportMetric(time.Since(start).Seconds(), "s-to-create")

		cpuBefore := map[string]float64{}
		for _, p := range e.c.Processes() {
			cpuBefore[p.Name] = cpuSeconds(p.Pid())
		}
		start = time.Now()
		op := e.startOperator("vm-operator", "--resync="+resync.String(), "--kube-api-qps=1000", "--kube-api-burst=2000", "-v=0")
		var peakRSS atomic.Int64
		stopSampling := sampleRSS(op.Pid(), &peakRSS)
		waitReconciled(b, e, s.vms)
		elapsed := time.Since(start)
		// Where the CPU went: the machine has 2 cores for all of them.
		for _, p := range e.c.Processes() {
			b.Logf("%s: %.1f s CPU while the VMs were reconciled", p.Name, cpuSeconds(p.Pid())-cpuBefore[p.Name])
		}
		cpuPerVM := (cpuSeconds(op.Pid()) - cpuBefore[op.Name]) / float64(s.vms) * 1000
		settled := e.waitSettled(b, op)
		// A namespace's runner ServiceAccount and RoleBinding are shared
		// by its VMs: counted apart.
		var perVM, perNamespace int
		for kind, n := range op.writesByKind(b) {
			if kind == "ServiceAccount" || kind == "RoleBinding" {
				perNamespace += n
			} else {
				perVM += n
			}
		}
		writes := float64(perVM) / float64(s.vms)

		time.Sleep(2*resync + 2*time.Second)
		resyncWrites := op.writes(b) - settled

		toScaled, toRunning := stateChangeLatency(b, e, s, changes)
		stopSampling()

		// As a user runs it, three times (the first warms kubectl's
		// discovery cache): the median.
		// The API server's CPU per list too: it sets the list's floor.
		var lists []time.Duration
		var apiserverCPU []float64
		for range 3 {
			before := processCPU(e, "kube-apiserver")
			d, out := kubectl("vm", "list", "-A")
			if rows := strings.Count(out, "\n") - 1; rows != s.vms {
				b.Fatalf("kubectl vm list -A: %d rows, want %d", rows, s.vms)
			}
			lists = append(lists, d)
			apiserverCPU = append(apiserverCPU, processCPU(e, "kube-apiserver")-before)
		}
		list := percentile(lists, 50)
		slices.Sort(apiserverCPU)

		b.ReportMetric(elapsed.Seconds(), "s-to-reconcile")
		b.ReportMetric(cpuPerVM, "operator-CPU-ms/VM")
		b.ReportMetric(writes, "writes/VM")
		b.ReportMetric(float64(perNamespace)/float64(s.namespaces()), "writes/namespace")
		b.ReportMetric(float64(resyncWrites), "resync-writes")
		b.ReportMetric(float64(peakRSS.Load())/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(ms(percentile(toScaled, 50)), "ms-p50-to-scaled")
		b.ReportMetric(ms(percentile(toScaled, 99)), "ms-p99-to-scaled")
		b.ReportMetric(ms(percentile(toRunning, 50)), "ms-p50-to-Running")
		b.ReportMetric(ms(percentile(toRunning, 99)), "ms-p99-to-Running")
		b.ReportMetric(list.Seconds(), "s-list-A")
		b.ReportMetric(apiserverCPU[1], "apiserver-CPU-s/list")
		// Also logged: a failed benchmark prints no metrics.
		b.Logf("%d VMs on %d nodes: reconciled in %.1f s, operator %.2f ms CPU/VM, peak RSS %d MiB, %.2f writes/VM, %d on resync, to scaled p50 %v p99 %v, to Running p50 %v p99 %v, kubectl vm list -A %v (API server %.2f s CPU)",
			s.vms, s.nodes, elapsed.Seconds(), cpuPerVM, peakRSS.Load()>>20, writes, resyncWrites,
			percentile(toScaled, 50).Round(time.Millisecond), percentile(toScaled, 99).Round(time.Millisecond),
			percentile(toRunning, 50).Round(time.Millisecond), percentile(toRunning, 99).Round(time.Millisecond), list.Round(time.Millisecond), apiserverCPU[1])
		if writes > 4 {
			b.Errorf("%.2f writes per VM, want at most 4", writes)
		}
		if resyncWrites != 0 {
			b.Errorf("%d writes during resyncs of an unchanged cluster, want 0", resyncWrites)
		}
		switch {
		case s.vms == 1000:
			cpuPerVMAt1000 = cpuPerVM
		case cpuPerVMAt1000 == 0:
			b.Logf("no 1,000-VM run before this one to compare the CPU per VM with")
		case cpuPerVM > cpuPerVMAt1000*(1+cpuNoise):
			b.Errorf("the operator used %.2f ms of CPU per VM at %d VMs, more than %.2f ms at 1,000 and the %.0f%% runs vary by",
				cpuPerVM, s.vms, cpuPerVMAt1000, cpuNoise*100)
		}
		if rss := peakRSS.Load(); rss >= 500<<20 {
			b.Errorf("the operator's peak RSS was %d MiB, want below 500", rss>>20)
		}
		if rss, limit := peakRSS.Load(), operatorMemoryLimit(b); rss >= limit {
			b.Errorf("the operator's peak RSS was %d MiB: its Deployment, limited to %d MiB, would be killed", rss>>20, limit>>20)
		}
		if p99 := percentile(toScaled, 99); p99 > time.Second {
			b.Errorf("a state change reached the StatefulSet in %v at p99, want within 1s", p99)
		}
		if list > 2*time.Second {
			b.Errorf("kubectl vm list -A took %v, want under 2s", list)
		}
	}
}

// createAll creates the scale's VMs from 16 clients at once.
func createAll(b *testing.B, e *env, s scale) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(s.vms); i = next.Add(1) - 1 {
				ns, name, node := s.vm(int(i))
				e.createVM(ns, strings.Replace(fmt.Sprintf(scaleVM, name), "nodeName: node-1", "nodeName: "+node, 1))
			}
		})
	}
	wg.Wait()
}

// waitReconciled waits until n VMs have a StatefulSet, a ConfigMap and a
// status for their generation, in every namespace. It counts from
// watches: listing thousands of objects again and again would load the
// API server that it measures.
func waitReconciled(b *testing.B, e *env, n int) {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	var (
		mu   sync.Mutex
		seen = map[string]map[string]bool{} // what -> namespace/name
	)
	follow := func(what string, w watch.Interface, err error, ok func(runtime.Object) bool) {
		if err != nil {
			b.Fatal(err)
		}
		seen[what] = map[string]bool{}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				m, err := meta.Accessor(ev.Object)
				if err != nil {
					continue
				}
				mu.Lock()
				seen[what][m.GetNamespace()+"/"+m.GetName()] = ev.Type != watch.Deleted && ok(ev.Object)
				mu.Unlock()
			}
		}()
	}
	all := func(runtime.Object) bool { return true }
	w, err := e.vms(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{})
	follow("VMs with a status", w, err, func(o runtime.Object) bool {
		u := o.(*unstructured.Unstructured)
		st := status(u)
		return st.ObservedGeneration == u.GetGeneration() && condition(st, v1.ConditionRunning).Type != ""
	})
	w, err = e.kube.AppsV1().StatefulSets(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{})
	follow("StatefulSets", w, err, all)
	w, err = e.kube.CoreV1().ConfigMaps(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{LabelSelector: vmpod.LabelName + "=" + vmpod.NameRunner})
	follow("ConfigMaps", w, err, all)
	eventually.Within(b, time.Duration(max(1, n/1000))*5*time.Minute, func() string {
		mu.Lock()
		defer mu.Unlock()
		for what, names := range seen {
			done := 0
			for _, ok := range names {
				if ok {
					done++
				}
			}
			if done < n {
				return fmt.Sprintf("%d of %d %s", done, n, what)
			}
		}
		return ""
	})
}

// stateChangeLatency starts n of the VMs one after another and returns,
// per VM, the time from the patch to its StatefulSet having 1 replica and
// to its status saying Running.
func stateChangeLatency(b *testing.B, e *env, s scale, n int) (toScaled, toRunning []time.Duration) {
	ctx := b.Context()
	var (
		mu      sync.Mutex
		patched = map[string]time.Time{}
		scaled  = map[string]time.Duration{}
		running = map[string]time.Duration{}
	)
	// From now on: without a resource version a watch would first send
	// every one of thousands of objects.
	stss, err := e.kube.AppsV1().StatefulSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	stsWatch, err := e.kube.AppsV1().StatefulSets(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{ResourceVersion: stss.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	defer stsWatch.Stop()
	vms, err := e.vms(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	vmWatch, err := e.vms(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{ResourceVersion: vms.GetResourceVersion()})
	if err != nil {
		b.Fatal(err)
	}
	defer vmWatch.Stop()
	record := func(w watch.Interface, into map[string]time.Duration, done func(watch.Event) (string, bool)) {
		for ev := range w.ResultChan() {
			name, ok := done(ev)
			if !ok {
				continue
			}
			mu.Lock()
			if t0, ok := patched[name]; ok {
				if _, seen := into[name]; !seen {
					into[name] = time.Since(t0)
				}
			}
			mu.Unlock()
		}
	}
	go record(stsWatch, scaled, func(ev watch.Event) (string, bool) {
		sts, ok := ev.Object.(*appsv1.StatefulSet)
		if !ok {
			return "", false
		}
		return sts.Namespace + "/" + sts.Name, sts.Spec.Replicas != nil && *sts.Spec.Replicas == 1
	})
	go record(vmWatch, running, func(ev watch.Event) (string, bool) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return "", false
		}
		return u.GetNamespace() + "/" + u.GetName(), condition(status(u), v1.ConditionRunning).Status == metav1.ConditionTrue
	})
	for i := range n {
		ns, name, _ := s.vm(i)
		mu.Lock()
		patched[ns+"/"+name] = time.Now()
		mu.Unlock()
		if _, err := e.vms(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"vm":{"state":"Running"}}}`), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	eventually.Within(b, 2*time.Minute, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(scaled) < n || len(running) < n {
			return fmt.Sprintf("%d scaled, %d running of %d", len(scaled), len(running), n)
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	for _, d := range scaled {
		toScaled = append(toScaled, d)
	}
	for _, d := range running {
		toRunning = append(toRunning, d)
	}
	return toScaled, toRunning
}

// operatorMemoryLimit is the memory limit of the operator's Deployment as
// kubectl vm install writes it.
func operatorMemoryLimit(b *testing.B) int64 {
	objs, err := install.Objects(install.Options{})
	require.NoError(b, err)
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		require.NoError(b, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d))
		return d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value()
	}
	b.Fatal("kubectl vm install writes no Deployment")
	return 0
}

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sampleRSS records the peak resident memory of process pid until the
// returned function is called.
func sampleRSS(pid int, peak *atomic.Int64) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if rss := readRSS(pid); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done) }
}

// cpuSeconds is the CPU time process pid used so far; 0 if it is gone.
// processCPU is the CPU seconds of the cluster's process name so far.
func processCPU(e *env, name string) float64 {
	for _, p := range e.c.Processes() {
		if p.Name == name {
			return cpuSeconds(p.Pid())
		}
	}
	return 0
}

func cpuSeconds(pid int) float64 {
	s, _ := procmem.CPUSeconds(pid)
	return s
}

// readRSS is the resident memory of process pid in bytes; 0 if it is
// gone.
func readRSS(pid int) int64 {
	rss, _ := procmem.RSS(pid)
	return rss
}

// BenchmarkStartLatency compares `kubectl vm start` with the `kubectl
// patch` that does the same to a VirtualMachine, both through the real
// kubectl (the plugin found on PATH), as medians of repeated runs. The
// bar: the plugin takes at most 1.5 times as long.
func BenchmarkStartLatency(b *testing.B) {
	const runs = 21
	e := newEnv(b)
	ns := e.namespace("latency", nil)
	e.createVM(ns, fmt.Sprintf(strings.Replace(runningVM, "state: Running", "state: Stopped", 1), "vm1"))
	kubectl := e.kubectl(b)
	timed := func(args ...string) time.Duration {
		e.patchVM(ns, "vm1", `{"state":"Stopped"}`)
		d, _ := kubectl(args...)
		return d
	}
	plugin := []string{"vm", "start", "-n", ns, "vm1"}
	patch := []string{"patch", "vm", "-n", ns, "vm1", "--type", "merge", "-p", `{"spec":{"vm":{"state":"Running"}}}`}
	for b.Loop() {
		timed(plugin...) // warm caches (kubectl's discovery cache, the page cache)
		timed(patch...)
		var p, k []time.Duration
		for range runs {
			p = append(p, timed(plugin...))
			k = append(k, timed(patch...))
		}
		pm, km := percentile(p, 50), percentile(k, 50)
		b.ReportMetric(ms(pm), "ms-kubectl-vm-start")
		b.ReportMetric(ms(km), "ms-kubectl-patch")
		b.ReportMetric(float64(pm)/float64(km), "ratio")
	}
}

// kubectl returns a function that runs the real kubectl, with the
// plugin on its PATH, as the cluster's admin, and returns how long it
// took and what it wrote to stdout.
func (e *env) kubectl(b *testing.B) func(args ...string) (time.Duration, string) {
	dir := filepath.Dir(vmopbin.Build(b, "kubectl-vm"))
	env := append(os.Environ(), "KUBECONFIG="+e.c.Kubeconfig, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return func(args ...string) (time.Duration, string) {
		cmd := exec.Command("kubectl", args...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("kubectl %v: %v: %s", args, err, errOut.String())
		}
		return time.Since(start), out.String()
	}
}

// agentVM is what BenchmarkNodeAgent runs 50 of on the agent's node:
// scaleVM, running, so the pod a VM gets by default, with a disk and a
// display.
var agentVM = strings.Replace(scaleVM, "  vm:\n", "  vm:\n    state: Running\n", 1)

// BenchmarkNodeAgent runs vm-node, as its DaemonSet's service account,
// for a node with 50 running VM pods (kwok runs them: no container asks
// the agent anything) and reports its resident memory once it serves
// them, its peak, and its CPU at idle over 30 s. The agent's device
// plugin runs too, with no kubelet to register with. Run it with
// -benchtime 1x.
func BenchmarkNodeAgent(b *testing.B) {
	const (
		pods = 50
		idle = 30 * time.Second
	)
	e := newEnv(b)
	ns := e.namespace("agent", nil)
	e.startOperator("vm-operator")
	for i := range pods {
		e.createVM(ns, fmt.Sprintf(agentVM, fmt.Sprintf("vm%d", i)))
	}
	eventually.Succeeds(b, 3*time.Minute, func() error {
		list, err := e.kube.CoreV1().Pods(ns).List(b.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running < pods {
			return fmt.Errorf("%d of %d VM pods running", running, pods)
		}
		return nil
	})
	bin := vmopbin.Build(b, "vm-node")
	root := b.TempDir()
	require.NoError(b, os.Mkdir(filepath.Join(root, "pods"), 0o755))
	kubeconfig := e.serviceAccountKubeconfig(install.DefaultNamespace, install.NodeAgentName)
	for b.Loop() {
		agent, err := e.c.StartProcess("vm-node", bin, "--kubeconfig="+kubeconfig, "--node-name="+node,
			"--kubelet-root-dir="+root, "--device-plugin-dir="+b.TempDir())
		require.NoError(b, err)
		var peak atomic.Int64
		stopSampling := sampleRSS(agent.Pid(), &peak)
		eventually.Succeeds(b, time.Minute, func() error {
			if !strings.Contains(agent.LogTail(20), "Serving the VM pods") {
				return errors.New("vm-node does not serve yet:\n" + agent.LogTail(20))
			}
			return nil
		})
		time.Sleep(2 * time.Second) // the pods' first polls
		serving := readRSS(agent.Pid())
		cpu := cpuSeconds(agent.Pid())
		time.Sleep(idle)
		idleCPU := cpuSeconds(agent.Pid()) - cpu
		stopSampling()
		b.ReportMetric(float64(serving)/(1<<20), "MiB-RSS")
		b.ReportMetric(float64(readRSS(agent.Pid()))/(1<<20), "MiB-RSS-idle")
		b.ReportMetric(float64(peak.Load())/(1<<20), "MiB-peak-RSS")
		b.ReportMetric(cpu, "CPU-s-to-serve")
		b.ReportMetric(idleCPU/idle.Seconds()*1000, "CPU-ms/s-idle")
		agent.Stop()
	}
}
