package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/vmpod"

	"github.com/vmop/vmop/test/harness/eventually"
)

// runningVM has everything that makes objects: disks (PVCs), a CD, SPICE
// (a generated display Secret) and cloud-init.
const runningVM = `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  nodeName: node-1
  cloudInit:
    userData:
      hostname: test
  vm:
    state: Running
    maximumCpus: 4
    currentCpus: 2
    maximumRam: 2Gi
    currentRam: 1Gi
    disks:
    - volumeClaimTemplate:
        metadata: {name: system}
        spec:
          resources: {requests: {storage: 1Gi}}
    - cdrom: {image: ""}
    display:
      spice: {port: 5910}
`

// tapVM is runningVM with a NIC that is a tap device on the host bridge
// br0: its runner stays privileged, with the host's network.
func tapVM(t testing.TB, name string) string {
	t.Helper()
	vm := fmt.Sprintf(runningVM, name)
	tap := strings.Replace(vm, "    disks:\n", "    networks:\n    - tap: {bridge: br0}\n    disks:\n", 1)
	require.NotEqual(t, vm, tap, "runningVM has no disks to put the NIC before")
	return tap
}

func TestOperator(t *testing.T) {
	e := newEnv(t)
	pvcDeletions := e.watchPVCDeletions()
	op := e.startOperator("vm-operator", "--resync=2s")
	eventually.Within(t, 30*time.Second, func() string {
		if op.logContains("Became the leader") {
			return ""
		}
		return "the operator did not take the lease"
	})
	eventually.Within(t, 30*time.Second, func() string {
		if op.probe("/healthz") == http.StatusOK && op.probe("/readyz") == http.StatusOK {
			return ""
		}
		return fmt.Sprintf("healthz %d, readyz %d", op.probe("/healthz"), op.probe("/readyz"))
	})

	t.Run("each example creates exactly its rendered objects", func(t *testing.T) {
		files, err := filepath.Glob("../../examples/*.yaml")
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for i, f := range files {
			ns := e.namespace(fmt.Sprintf("example-%d", i), nil)
			vm, others := e.applyExample(t, f, ns)
			e.requireRendered(t, vm, others)
		}
	})

	t.Run("a VM starts, changes live, needs a restart, stops and is deleted keeping its disks", func(t *testing.T) {
		ns := e.namespace("lifecycle", nil)
		created := e.createVM(ns, fmt.Sprintf(runningVM, "vm1"))
		st := e.waitStatus(ns, "vm1", 60*time.Second, "running", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Status == metav1.ConditionTrue
		})
		require.Equal(t, node, st.Node)
		require.Equal(t, created.GetGeneration(), st.ObservedGeneration)
		require.Equal(t, v1.ReasonRunning, condition(st, v1.ConditionRunning).Reason)
		require.Equal(t, metav1.ConditionFalse, condition(st, v1.ConditionRestartRequired).Status)
		require.Equal(t, metav1.ConditionFalse, condition(st, v1.ConditionFailed).Status)
		e.waitStatus(ns, "vm1", 30*time.Second, "ready", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionReady).Status == metav1.ConditionTrue
		})
		e.requireRendered(t, e.getVM(ns, "vm1"), nil)
		out, err := e.c.Kubectl(t.Context(), "get", "vms", "-n", ns).CombinedOutput()
		require.NoError(t, err, "%s", out)
		// CPUS and RAM are empty: no runner reports them under kwok.
		require.Equal(t, []string{"vm1", "Running", "Running", node}, strings.Fields(strings.Split(string(out), "\n")[1])[:4],
			"kubectl get vms:\n%s", out)
		secret, err := e.kube.CoreV1().Secrets(ns).Get(t.Context(), "vm1-display-secret", metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, secret.Data["display-password"], 32, "a random password")
		require.Equal(t, "now", string(secret.Data["password-expiry"]), "locked until a console sets one")
		require.Equal(t, created.GetUID(), metav1.GetControllerOf(secret).UID)
		pod := e.pod(t, ns, "vm1-0")
		sts := e.statefulSet(t, ns, "vm1")

		// Live changes: only the ConfigMap changes, the pod stays.
		e.patchVM(ns, "vm1", `{"currentCpus":3,"currentRam":"1536Mi"}`)
		e.waitConfig(t, ns, "vm1", "currentCpus: 3", "currentRam: 1610612736")
		_, err = e.vms(ns).Patch(t.Context(), "vm1", types.JSONPatchType,
			[]byte(`[{"op":"replace","path":"/spec/vm/disks/1/cdrom/image","value":"installer.iso"}]`), metav1.PatchOptions{})
		require.NoError(t, err)
		e.waitConfig(t, ns, "vm1", "installer.iso")
		e.waitPodSynced(t, ns, "vm1")
		gen := e.getVM(ns, "vm1").GetGeneration()
		st = e.waitStatus(ns, "vm1", 30*time.Second, "observed the live changes", func(st v1.VirtualMachineStatus) bool {
			return st.ObservedGeneration == gen
		})
		require.Equal(t, metav1.ConditionFalse, condition(st, v1.ConditionRestartRequired).Status)
		require.Equal(t, sts.Generation, e.statefulSet(t, ns, "vm1").Generation, "the StatefulSet was not changed")
		require.Equal(t, pod.UID, e.pod(t, ns, "vm1-0").UID, "the pod was not recreated")

		// maximumRam applies only at the next start.
		e.patchVM(ns, "vm1", `{"maximumRam":"4Gi"}`)
		st = e.waitStatus(ns, "vm1", 30*time.Second, "restart required", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRestartRequired).Status == metav1.ConditionTrue
		})
		require.Contains(t, condition(st, v1.ConditionRestartRequired).Message, "stop and start")
		require.Equal(t, pod.UID, e.pod(t, ns, "vm1-0").UID, "the pod was not touched")
		require.Equal(t, metav1.ConditionTrue, condition(st, v1.ConditionRunning).Status)

		// Stopped: no pod; the restart is no longer pending.
		e.patchVM(ns, "vm1", `{"state":"Stopped"}`)
		eventually.Within(t, 60*time.Second, func() string {
			if r := e.statefulSet(t, ns, "vm1").Spec.Replicas; *r != 0 {
				return fmt.Sprintf("replicas %d", *r)
			}
			if _, err := e.kube.CoreV1().Pods(ns).Get(t.Context(), "vm1-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("pod still there (%v)", err)
			}
			return ""
		})
		st = e.waitStatus(ns, "vm1", 30*time.Second, "stopped", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Reason == v1.ReasonStopped
		})
		require.Empty(t, st.Node)
		require.Equal(t, metav1.ConditionFalse, condition(st, v1.ConditionRestartRequired).Status)

		// Deleted: the garbage collector removes what the VM owned; the
		// PVCs stay.
		pvcs := e.pvcNames(t, ns)
		require.ElementsMatch(t, []string{"runner-data-vm1-0", "system-disk-vm1-0"}, pvcs)
		require.NoError(t, e.vms(ns).Delete(t.Context(), "vm1", metav1.DeleteOptions{}))
		eventually.Within(t, 60*time.Second, func() string {
			if left := e.ownedObjects(t, ns, "vm1"); len(left) > 0 {
				return fmt.Sprintf("left: %v", left)
			}
			return ""
		})
		require.ElementsMatch(t, pvcs, e.pvcNames(t, ns), "the disks outlive the VM")
	})

	t.Run("a pod that cannot be created sets Failed with the reason", func(t *testing.T) {
		// Pod Security "restricted" takes the pod of a VM without a tap
		// NIC, but not the privileged runner on the host's network that a
		// tap NIC on a host bridge needs.
		ns := e.namespace("restricted", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
		e.createVM(ns, tapVM(t, "vm2"))
		e.createVM(ns, fmt.Sprintf(runningVM, "unprivileged"))
		st := e.waitStatus(ns, "vm2", 60*time.Second, "failed", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionFailed).Status == metav1.ConditionTrue
		})
		f := condition(st, v1.ConditionFailed)
		require.Equal(t, v1.ReasonPodCreateFailed, f.Reason)
		require.Contains(t, f.Message, `violates PodSecurity "restricted:latest"`)
		require.Contains(t, f.Message, "hostNetwork=true")
		require.Contains(t, f.Message, `container "runner" must not set securityContext.privileged=true`)
		require.Equal(t, v1.ReasonStarting, condition(st, v1.ConditionRunning).Reason)
		_, err := e.kube.CoreV1().Pods(ns).Get(t.Context(), "vm2-0", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "no pod of the tap VM: %v", err)

		// Its neighbour without a tap NIC runs, unprivileged.
		st = e.waitStatus(ns, "unprivileged", 60*time.Second, "running", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Status == metav1.ConditionTrue
		})
		require.Equal(t, metav1.ConditionFalse, condition(st, v1.ConditionFailed).Status)
		pod := e.pod(t, ns, "unprivileged-0")
		require.False(t, pod.Spec.HostNetwork)
		require.EqualValues(t, nodeagent.RunnerUID, *pod.Spec.SecurityContext.RunAsUser)
		require.Equal(t, "1", ptr.To(pod.Spec.Containers[0].Resources.Limits[nodeagent.Resource]).String())
	})

	t.Run("RAM that is no whole MiB is rounded up and the status says so", func(t *testing.T) {
		ns := e.namespace("warnings", nil)
		e.createVM(ns, strings.Replace(fmt.Sprintf(runningVM, "vm256m"), "maximumRam: 2Gi\n    currentRam: 1Gi", "maximumRam: 256M", 1))
		st := e.waitStatus(ns, "vm256m", 60*time.Second, "SpecWarnings", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionSpecWarnings).Status == metav1.ConditionTrue
		})
		w := condition(st, v1.ConditionSpecWarnings)
		require.Equal(t, v1.ReasonWarnings, w.Reason)
		require.Equal(t, "spec.vm.maximumRam 256M is not a whole number of MiB: the VM gets 245Mi (qemu sizes RAM in MiB).", w.Message)
		require.Equal(t, metav1.ConditionFalse, condition(st, v1.ConditionFailed).Status)
		require.EqualValues(t, 245<<20, e.runnerConfig(t, ns, "vm256m").VM.MaximumRAM.Bytes, "the runner gives the VM whole MiB")
	})

	// The case: a policy of the cluster's administrator (the same
	// goes for a quota or a webhook) refuses the VM's StatefulSet. Users
	// cannot read the operator's log: the status, kubectl vm status and
	// the events must tell them, and the VM must recover by itself once
	// the policy is gone.
	t.Run("a tap MAC that an older VM of the namespace has is refused until that VM goes", func(t *testing.T) {
		ns := e.namespace("macs", nil)
		withMAC := func(name string) string {
			return strings.Replace(fmt.Sprintf(runningVM, name), "    disks:\n", "    networks:\n    - tap: {mac: \"52:54:00:AA:00:01\"}\n    disks:\n", 1)
		}
		e.createVM(ns, withMAC("first"))
		e.waitStatus(ns, "first", 60*time.Second, "running", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Status == metav1.ConditionTrue
		})
		e.createVM(ns, withMAC("second"))
		st := e.waitStatus(ns, "second", 30*time.Second, "refused", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionFailed).Reason == v1.ReasonMACConflict
		})
		require.Equal(t, "second: spec.vm.networks[0].tap.mac: 52:54:00:aa:00:01 is also a tap NIC's of VM first, which is older: two guests with one MAC on a bridge take each other's traffic; give this one another MAC",
			condition(st, v1.ConditionFailed).Message)
		_, err := e.kube.AppsV1().StatefulSets(ns).Get(t.Context(), "second", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "nothing of the refused VM is applied: %v", err)
		stdout, _, err := e.plugin(t.Context(), "status", "-n", ns, "second")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^  Failed\s+True\s+MACConflict\s`, stdout)
		require.Regexp(t, `(?m)^  Warning\s+MACConflict\s+.*is also a tap NIC's of VM first`, stdout)

		// The older VM goes: the other one is applied at its next check.
		require.NoError(t, e.vms(ns).Delete(t.Context(), "first", metav1.DeleteOptions{}))
		e.waitStatus(ns, "second", 90*time.Second, "running once the other is gone", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Status == metav1.ConditionTrue && condition(st, v1.ConditionFailed).Status == metav1.ConditionFalse
		})
	})

	t.Run("a write the API server refuses shows in the status and events until it succeeds", func(t *testing.T) {
		ctx := t.Context()
		ns := e.namespace("refused", nil)
		const refusal = "StatefulSets in this namespace need the platform team's approval"
		e.denyWrites(t, ns, "apps", "statefulsets", refusal, func(ctx context.Context) error {
			_, err := e.kube.AppsV1().StatefulSets(ns).Create(ctx, probeStatefulSet(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		})
		created := e.createVM(ns, fmt.Sprintf(runningVM, "vm3"))
		st := e.waitStatus(ns, "vm3", 10*time.Second, "Failed/ApplyFailed", func(st v1.VirtualMachineStatus) bool {
			f := condition(st, v1.ConditionFailed)
			return f.Status == metav1.ConditionTrue && f.Reason == v1.ReasonApplyFailed
		})
		f := condition(st, v1.ConditionFailed)
		require.Contains(t, f.Message, refusal)
		require.Contains(t, f.Message, "StatefulSet "+ns+"/vm3")
		require.Equal(t, created.GetGeneration(), st.ObservedGeneration)
		require.Equal(t, created.GetGeneration(), f.ObservedGeneration)
		require.Equal(t, v1.ReasonStarting, condition(st, v1.ConditionRunning).Reason)

		out, err := e.c.Kubectl(ctx, "wait", "-n", ns, "--for=condition=Failed", "--timeout=10s", "vm/vm3").CombinedOutput()
		require.NoError(t, err, "kubectl wait: %s", out)
		out, err = e.c.Kubectl(ctx, "get", "vms", "-n", ns, "vm3").CombinedOutput()
		require.NoError(t, err, "%s", out)
		// STATUS is the failure's reason, as kubectl get pods shows
		// CrashLoopBackOff: vm-operator's printableStatus.
		require.Equal(t, []string{"vm3", "Running", v1.ReasonApplyFailed}, strings.Fields(strings.Split(string(out), "\n")[1])[:3], "kubectl get vms:\n%s", out)
		// kubectl vm list reads the same printer columns: the spec's
		// currentCpus and currentRam (the operator's targets) stand in
		// for the sizes in use.
		stdout, _, err := e.plugin(ctx, "list", "-n", ns)
		require.NoError(t, err)
		require.Equal(t, []string{"vm3", "Running", v1.ReasonApplyFailed, "(2)", "(1Gi)"}, strings.Fields(strings.Split(stdout, "\n")[1])[:5], "kubectl vm list:\n%s", stdout)
		eventually.Within(t, 10*time.Second, func() string {
			out, err := e.c.Kubectl(ctx, "events", "-n", ns, "--for", "vm/vm3").CombinedOutput()
			if err != nil || !regexp.MustCompile(`Warning\s+ApplyFailed\s+VirtualMachine/vm3\s+.*`+regexp.QuoteMeta(refusal)).Match(out) {
				return fmt.Sprintf("kubectl events (%v):\n%s", err, out)
			}
			return ""
		})
		stdout, _, err = e.plugin(ctx, "status", "-n", ns, "vm3")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^Status:\s+ApplyFailed: The VM's objects could not be applied: apply StatefulSet `+ns+`/vm3: .*`+regexp.QuoteMeta(refusal), stdout)
		require.Regexp(t, `(?m)^  Failed\s+True\s+ApplyFailed\s`, stdout)
		require.Regexp(t, `(?m)^  Warning\s+ApplyFailed\s+.*vmoperator.jdrupes.org/vm-operator\s+The VM's objects could not be applied`, stdout)

		// Labels in name order, as client_golang writes them.
		vmSeries := func(metric, label string) string {
			return fmt.Sprintf(`%s{name="vm3",namespace="%s",%s}`, metric, ns, label)
		}
		require.Contains(t, op.scrape(t), vmSeries("vmop_vm_failed", `reason="ApplyFailed"`)+" 1")

		e.allowConfigMaps(t)
		// The operator retries at most 30 s apart (retryMax).
		st = e.waitStatus(ns, "vm3", 60*time.Second, "running after the policy is gone", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Status == metav1.ConditionTrue && condition(st, v1.ConditionFailed).Status == metav1.ConditionFalse
		})
		require.Equal(t, v1.ReasonNoFailure, condition(st, v1.ConditionFailed).Reason)
		e.requireRendered(t, e.getVM(ns, "vm3"), nil)
		eventually.Within(t, 10*time.Second, func() string {
			out, err := e.c.Kubectl(ctx, "events", "-n", ns, "--for", "vm/vm3", "--types", "Normal").CombinedOutput()
			for _, want := range []string{`Created\s+VirtualMachine/vm3\s+Created StatefulSet vm3`, `Recovered\s+VirtualMachine/vm3\s+The VM no longer fails \(was ApplyFailed`, `Started\s+VirtualMachine/vm3\s+The runner pod runs on ` + node} {
				if err != nil || !regexp.MustCompile(want).Match(out) {
					return fmt.Sprintf("no %q in kubectl events (%v):\n%s", want, err, out)
				}
			}
			return ""
		})
		stdout, _, err = e.plugin(ctx, "status", "-n", ns, "vm3")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^Status:\s+Running: `, stdout)
		metrics := op.scrape(t)
		require.Contains(t, metrics, vmSeries("vmop_vm_failed", `reason="NoFailure"`)+" 0")
		require.Contains(t, metrics, vmSeries("vmop_vm_state", `state="Running"`)+" 1")
	})

	t.Run("a resync of an unchanged cluster writes nothing", func(t *testing.T) {
		settled := e.waitSettled(t, op)
		require.Positive(t, settled)
		time.Sleep(5 * time.Second) // two resyncs of --resync=2s and then some
		require.Equal(t, settled, op.writes(t), "writes during resyncs")
	})

	t.Run("an operator killed mid-way converges after a restart", func(t *testing.T) {
		ns := e.namespace("restart", nil)
		names := make([]string, 30)
		for i := range names {
			names[i] = fmt.Sprintf("r%02d", i)
			e.createVM(ns, fmt.Sprintf(runningVM, names[i]))
			if i == 10 {
				op.Stop() // SIGKILL, no goodbye
			}
		}
		op = e.startOperator("vm-operator-2", "--resync=2s")
		for _, n := range names {
			e.waitStatus(ns, n, 90*time.Second, "running", func(st v1.VirtualMachineStatus) bool {
				return condition(st, v1.ConditionRunning).Status == metav1.ConditionTrue
			})
			e.requireRendered(t, e.getVM(ns, n), nil)
		}
		// Exactly one of each object: no duplicates, nothing lost.
		for kind, count := range e.objectCounts(t, ns) {
			want := len(names)
			if kind == "Secret" {
				want = 2 * len(names) // cloud-init and display
			}
			require.Equal(t, want, count, kind)
		}
	})

	t.Run("a second operator stays passive until the first one stops", func(t *testing.T) {
		e.waitSettled(t, op)
		standby := e.startOperator("vm-operator-standby", "--resync=2s")
		eventually.Within(t, 30*time.Second, func() string {
			if standby.logContains("Standing by") {
				return ""
			}
			return "the second operator did not stand by"
		})
		ns := e.namespace("leader", nil)
		e.createVM(ns, fmt.Sprintf(runningVM, "l1"))
		e.waitStatus(ns, "l1", 60*time.Second, "reconciled by the leader", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Status == metav1.ConditionTrue
		})
		require.Equal(t, 0, standby.writes(t), "the standby wrote")
		require.Equal(t, http.StatusOK, standby.probe("/readyz"), "a standby is ready (to take over)")
		require.False(t, standby.logContains("Became the leader"))

		op.terminate(t)
		require.True(t, op.logContains("Shutting down workers"), "graceful stop")
		eventually.Within(t, 20*time.Second, func() string {
			if standby.logContains("Became the leader") {
				return ""
			}
			return "the standby did not take over"
		})
		e.createVM(ns, fmt.Sprintf(runningVM, "l2"))
		e.waitStatus(ns, "l2", 60*time.Second, "reconciled by the new leader", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Status == metav1.ConditionTrue
		})
		require.Positive(t, standby.writes(t))
	})

	require.Empty(t, pvcDeletions(), "no PVC is ever deleted")
}

// applyExample creates the documents of an example file in namespace ns
// and returns the VM and the other objects' names by kind.
func (e *env) applyExample(t *testing.T, file, ns string) (*unstructured.Unstructured, map[string][]string) {
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	r := manifest.NewReader(bytes.NewReader(data))
	var vm *unstructured.Unstructured
	others := map[string][]string{}
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(d.JSON))
		u.SetNamespace(ns)
		switch u.GetKind() {
		case v1.Kind:
			vm, err = e.vms(ns).Create(t.Context(), u, metav1.CreateOptions{})
		case "Secret":
			_, err = e.dyn.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{})
			others["Secret"] = append(others["Secret"], u.GetName())
		default:
			t.Fatalf("%s: unexpected %s", file, u.GetKind())
		}
		require.NoError(t, err, "%s: %s %s", file, u.GetKind(), u.GetName())
	}
	require.NotNil(t, vm, "%s has a VM", file)
	return vm, others
}

// requireRendered waits until the VM's objects in the cluster are exactly
// what render makes of it (by name and render hash, owned by the VM), plus
// a generated display Secret and the given other objects, and its status
// is written for its generation.
func (e *env) requireRendered(t *testing.T, u *unstructured.Unstructured, others map[string][]string) {
	t.Helper()
	vm, err := v1.DecodeJSON(mustJSON(t, u))
	require.NoError(t, err)
	objs, err := render.Render(vm, render.Options{ServiceAccount: install.RunnerServiceAccount})
	require.NoError(t, err)
	want := map[string]string{} // kind/name -> hash
	for _, o := range objs.List() {
		m := o.(metav1.Object)
		want[o.GetObjectKind().GroupVersionKind().Kind+"/"+m.GetName()] = m.GetAnnotations()[render.AnnotationHash]
	}
	for kind, names := range others {
		for _, n := range names {
			want[kind+"/"+n] = "" // not rendered: any hash
		}
	}
	vm.Default()
	if sp := vm.Spec.VM.Display; vm.Spec.VM.State == v1.StateRunning && sp != nil && sp.Spice != nil && *sp.Spice.GenerateSecret && len(others["Secret"]) == 0 {
		want["Secret/"+render.DisplaySecretName(vm.Name)] = ""
	}
	eventually.Within(t, 60*time.Second, func() string {
		have := e.ownedObjects(t, vm.Namespace, vm.Name)
		if !slices.Equal(sortedKeys(want), sortedKeys(have)) {
			return fmt.Sprintf("objects of %s: have %v, want %v", vm.Name, sortedKeys(have), sortedKeys(want))
		}
		for k, h := range want {
			if h != "" && have[k].hash != h {
				return fmt.Sprintf("%s: hash %q, want %q", k, have[k].hash, h)
			}
			if h != "" && have[k].owner != u.GetUID() {
				return fmt.Sprintf("%s: not owned by the VM", k)
			}
		}
		st := status(e.getVM(vm.Namespace, vm.Name))
		if st.ObservedGeneration != u.GetGeneration() || condition(st, v1.ConditionRunning).Type == "" {
			return fmt.Sprintf("status not written: %+v", st)
		}
		return ""
	})
}

type objectInfo struct {
	hash  string
	owner types.UID
}

// ownedObjects lists the VM's StatefulSets, ConfigMaps, Secrets and
// Services by kind/name.
func (e *env) ownedObjects(t *testing.T, ns, vm string) map[string]objectInfo {
	ctx := t.Context()
	sel := metav1.ListOptions{LabelSelector: labels.Set{vmpod.LabelInstance: vm}.String()}
	out := map[string]objectInfo{}
	add := func(kind string, m metav1.Object) {
		info := objectInfo{hash: m.GetAnnotations()[render.AnnotationHash]}
		if ref := metav1.GetControllerOf(m); ref != nil {
			info.owner = ref.UID
		}
		out[kind+"/"+m.GetName()] = info
	}
	stss, err := e.kube.AppsV1().StatefulSets(ns).List(ctx, sel)
	require.NoError(t, err)
	for i := range stss.Items {
		add("StatefulSet", &stss.Items[i])
	}
	cms, err := e.kube.CoreV1().ConfigMaps(ns).List(ctx, sel)
	require.NoError(t, err)
	for i := range cms.Items {
		add("ConfigMap", &cms.Items[i])
	}
	secrets, err := e.kube.CoreV1().Secrets(ns).List(ctx, sel)
	require.NoError(t, err)
	for i := range secrets.Items {
		add("Secret", &secrets.Items[i])
	}
	svcs, err := e.kube.CoreV1().Services(ns).List(ctx, sel)
	require.NoError(t, err)
	for i := range svcs.Items {
		add("Service", &svcs.Items[i])
	}
	return out
}

// objectCounts counts the VMs' objects in ns by kind.
func (e *env) objectCounts(t *testing.T, ns string) map[string]int {
	counts := map[string]int{}
	vms, err := e.vms(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, vm := range vms.Items {
		for k := range e.ownedObjects(t, ns, vm.GetName()) {
			counts[k[:strings.IndexByte(k, '/')]]++
		}
	}
	return counts
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func mustJSON(t *testing.T, u *unstructured.Unstructured) []byte {
	b, err := u.MarshalJSON()
	require.NoError(t, err)
	return b
}

func (e *env) pod(t *testing.T, ns, name string) *corev1.Pod {
	p, err := e.kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return p
}

func (e *env) statefulSet(t *testing.T, ns, name string) *appsv1.StatefulSet {
	s, err := e.kube.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return s
}

// waitConfig waits until the VM's runner config contains every string.
func (e *env) waitConfig(t *testing.T, ns, name string, want ...string) {
	t.Helper()
	eventually.Within(t, 30*time.Second, func() string {
		cm, err := e.kube.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, w := range want {
			if !strings.Contains(cm.Data["config.yaml"], w) {
				return fmt.Sprintf("config lacks %q:\n%s", w, cm.Data["config.yaml"])
			}
		}
		return ""
	})
}

// waitPodSynced waits until the VM's pod carries the resourceVersion of
// the VM's ConfigMap in podsync.AnnotationConfigVersion, which makes the
// kubelet refresh the pod's config volume at once, and returns it.
func (e *env) waitPodSynced(t *testing.T, ns, name string) string {
	t.Helper()
	var rv string
	eventually.Within(t, 10*time.Second, func() string {
		cm, err := e.kube.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		pod, err := e.kube.CoreV1().Pods(ns).Get(t.Context(), render.PodName(name), metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if rv = pod.Annotations[podsync.AnnotationConfigVersion]; rv != cm.ResourceVersion {
			return fmt.Sprintf("pod %s: %s %q, ConfigMap's resourceVersion %s", pod.Name, podsync.AnnotationConfigVersion, rv, cm.ResourceVersion)
		}
		return ""
	})
	return rv
}

func (e *env) pvcNames(t *testing.T, ns string) []string {
	list, err := e.kube.CoreV1().PersistentVolumeClaims(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names
}

// watchPVCDeletions records every PVC deletion in the cluster for the
// rest of the test.
func (e *env) watchPVCDeletions() func() []string {
	w, err := e.kube.CoreV1().PersistentVolumeClaims("").Watch(e.t.Context(), metav1.ListOptions{})
	require.NoError(e.t, err)
	var (
		mu      sync.Mutex
		deleted []string
	)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Deleted {
				continue
			}
			if p, ok := ev.Object.(*corev1.PersistentVolumeClaim); ok {
				mu.Lock()
				deleted = append(deleted, p.Namespace+"/"+p.Name)
				mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(w.Stop)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(deleted)
	}
}

// waitSettled waits until the operator's write count stops changing and
// returns it.
func (e *env) waitSettled(t testing.TB, op *operator) int {
	t.Helper()
	last, since := op.writes(t), time.Now()
	for time.Since(since) < 3*time.Second {
		time.Sleep(250 * time.Millisecond)
		if n := op.writes(t); n != last {
			last, since = n, time.Now()
		}
	}
	return last
}

const denyPolicy = "e2e-deny-writes"

// probeStatefulSet is a valid StatefulSet for dry-run writes.
func probeStatefulSet() *appsv1.StatefulSet {
	lbl := map[string]string{"app": "probe"}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
			},
		},
	}
}

// denyConfigMaps makes the API server reject ConfigMap writes in ns, as a
// stand-in for any failing write (conflict, webhook, quota).
func (e *env) denyConfigMaps(t *testing.T, ns string) {
	e.denyWrites(t, ns, "", "configmaps", "denied by the e2e test", func(ctx context.Context) error {
		_, err := e.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// denyWrites makes the API server reject creates and updates of resource
// (of API group) in ns with message, through a ValidatingAdmissionPolicy
// as a cluster's administrator would; probe tries a write (dry run), so
// that denyWrites returns once the policy is in force.
func (e *env) denyWrites(t *testing.T, ns, group, resource, message string, probe func(context.Context) error) {
	ctx := t.Context()
	_, err := e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: denyPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: message}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: denyPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        denyPolicy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
			}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// The policy takes effect after the API server has loaded it.
	eventually.Within(t, 10*time.Second, func() string {
		if err := probe(ctx); err == nil || !strings.Contains(err.Error(), message) {
			return fmt.Sprintf("the policy is not in force yet: %v", err)
		}
		return ""
	})
}

// allowConfigMaps removes what denyConfigMaps or denyWrites made.
func (e *env) allowConfigMaps(t *testing.T) {
	ctx := t.Context()
	require.NoError(t, e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, denyPolicy, metav1.DeleteOptions{}))
	require.NoError(t, e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, denyPolicy, metav1.DeleteOptions{}))
}
