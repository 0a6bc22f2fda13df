package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/gitops"
	"github.com/vmop/vmop/test/harness/gitserver"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

const fluxNS = "flux-system"

var fluxInstall once

// installFlux installs Flux's source-controller and kustomize-controller
// (once per test binary) and runs them while t runs, from the manifests of their releases (their
// config/ trees: CRDs, Deployments, Service) with the images built here,
// as `flux install` would, which the tests do not build: in flux-system,
// kustomize-controller with cluster-admin (flux install's
// cluster-reconciler binding; here both controllers share the namespace's
// default ServiceAccount).
func installFlux(t *testing.T) {
	t.Helper()
	fluxInstall.do(t, func() {
		dir := t.TempDir()
		for _, c := range []string{"source-controller", "kustomize-controller"} {
			out, err := exec.Command("cp", "-r", filepath.Join(gitopsBuild.Manifests(), c), filepath.Join(dir, c)).CombinedOutput()
			require.NoError(t, err, "%s", out)
		}
		k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %[1]s
resources:
- source-controller/crd
- source-controller/manager
- kustomize-controller/crd
- kustomize-controller/manager
- rbac.yaml
images:
- name: fluxcd/source-controller
  newName: %[2]s
  newTag: %[3]s
- name: fluxcd/kustomize-controller
  newName: %[4]s
  newTag: %[5]s
`, fluxNS, imageName(gitops.SourceControllerImage), imageTag(gitops.SourceControllerImage),
			imageName(gitops.KustomizeControllerImage), imageTag(gitops.KustomizeControllerImage))
		rbac := fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: flux-reconciler
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
- kind: ServiceAccount
  name: default
  namespace: %s
`, fluxNS)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "rbac.yaml"), []byte(rbac), 0o644))
		manifests := kubectl(t, "", "kustomize", dir)
		kubectl(t, "", "create", "namespace", fluxNS)
		kubectl(t, manifests, "apply", "--server-side", "-f", "-")
	})
	runWorkloads(t, fluxNS, "deployment/source-controller", "deployment/kustomize-controller")
}

// fluxKustomization is what the tests read of a Flux Kustomization.
type fluxKustomization struct {
	Status struct {
		Conditions []metav1.Condition `json:"conditions"`
		// LastAppliedRevision is "<branch>@sha1:<commit>".
		LastAppliedRevision    string `json:"lastAppliedRevision"`
		LastHandledReconcileAt string `json:"lastHandledReconcileAt"`
	} `json:"status"`
}

func (k fluxKustomization) ready() *metav1.Condition {
	for i, c := range k.Status.Conditions {
		if c.Type == "Ready" {
			return &k.Status.Conditions[i]
		}
	}
	return nil
}

// waitKustomization waits until the Kustomization name has applied
// revision and says Ready (its health checks passed, with wait: true),
// and returns how long that took.
func waitKustomization(t *testing.T, name, revision string, timeout time.Duration) time.Duration {
	t.Helper()
	return waitFlux(t, name, timeout, func(k fluxKustomization) string {
		r := k.ready()
		switch {
		case !strings.HasSuffix(k.Status.LastAppliedRevision, ":"+revision):
			return fmt.Sprintf("applied %q, not %s", k.Status.LastAppliedRevision, revision)
		case r.Status != metav1.ConditionTrue:
			return "not Ready"
		}
		return ""
	})
}

// waitFlux waits until check finds nothing wrong with the Kustomization
// name, which has a Ready condition, and returns how long that took.
func waitFlux(t *testing.T, name string, timeout time.Duration, check func(k fluxKustomization) string) time.Duration {
	t.Helper()
	start := time.Now()
	eventually.Within(t, timeout, func() string {
		out, errOut, err := kubectlResult(t.Context(), "", "get", "kustomizations.kustomize.toolkit.fluxcd.io", "-n", fluxNS, name, "-o", "json")
		if err != nil {
			return errOut
		}
		var k fluxKustomization
		if err := json.Unmarshal([]byte(out), &k); err != nil {
			return err.Error()
		}
		r := k.ready()
		if r == nil {
			return "no Ready condition"
		}
		if problem := check(k); problem != "" {
			return fmt.Sprintf("%s: %s; Ready %s %s: %s", name, problem, r.Status, r.Reason, r.Message)
		}
		return ""
	})
	return time.Since(start)
}

// reconcileFlux asks Flux to fetch and apply now, as `flux reconcile
// kustomization --with-source` does, rather than at the next interval,
// and waits until the Kustomization has handled the request: one still
// pending would undo what the test does next (seen: a kubectl vm stop
// undone before it was done).
func reconcileFlux(t *testing.T, kustomization string) {
	t.Helper()
	now := time.Now().Format(time.RFC3339Nano)
	for _, obj := range []string{"gitrepositories.source.toolkit.fluxcd.io/vms", "kustomizations.kustomize.toolkit.fluxcd.io/" + kustomization} {
		kubectl(t, "", "annotate", "-n", fluxNS, obj, "reconcile.fluxcd.io/requestedAt="+now, "--overwrite")
	}
	waitFlux(t, kustomization, 4*time.Minute, func(k fluxKustomization) string {
		if k.Status.LastHandledReconcileAt != now {
			return fmt.Sprintf("has handled the reconcile asked at %q, not the one at %s", k.Status.LastHandledReconcileAt, now)
		}
		return ""
	})
}

// applyFluxExample applies the example files of Flux with the test's
// repository.
func applyFluxExample(t *testing.T, repoURL string, files ...string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("../../examples/flux", f))
		require.NoError(t, err)
		m := string(b)
		if f == "gitrepository.yaml" {
			require.Contains(t, m, "url: https://git.example/vms.git\n")
			m = strings.Replace(m, "url: https://git.example/vms.git\n", "url: "+repoURL+"\n", 1)
		}
		kubectl(t, m, "apply", "-f", "-")
	}
}

// fluxNamespace is a namespace kept in Git, as Flux applies no
// namespace of its own: restricted, as VM pods need no more.
func fluxNamespace(ns string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    pod-security.kubernetes.io/enforce: restricted
`, ns)
}

// renderVMs is what kubectl vm render makes of the VM manifests.
func renderVMs(t *testing.T, manifests ...string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "vms.yaml")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(manifests, "---\n")), 0o644))
	return kubectl(t, "", "vm", "render", "-f", file)
}

// TestFluxRendered is GitOps mode with the real Flux: what kubectl vm
// render makes of two VMs, one running and one stopped, committed to Git
// and applied by a Kustomization with wait and prune
// (examples/flux/rendered.yaml).
func TestFluxRendered(t *testing.T) {
	installFlux(t)
	const ns = "flux-rendered"
	repo := gitserver.Start(t, testnode.IP).Repo(t, "vms")
	running := gitopsGuestVM("running", ns)
	stopped := strings.Replace(gitopsGuestVM("stopped", ns), "state: Running", "state: Stopped", 1)
	addGuestDisk(t, ns, "running")
	// No volumes for the stopped VM: it claims none, and a volume left
	// Available would bind a later test's claim.
	rev := repo.Write("two VMs", map[string]string{
		"rendered/namespace.yaml": fluxNamespace(ns),
		"rendered/vms.yaml":       renderVMs(t, running, stopped),
	})
	applyFluxExample(t, repo.URL, "gitrepository.yaml", "rendered.yaml")
	t.Cleanup(func() {
		_, _, _ = kubectlResult(context.Background(), "", "delete", "-n", fluxNS, "kustomizations.kustomize.toolkit.fluxcd.io/rendered-vms", "gitrepositories.source.toolkit.fluxcd.io/vms", "--wait", "--timeout", "4m")
		_, _, _ = kubectlResult(context.Background(), "", "delete", "namespace", ns, "--wait", "--timeout", "4m")
	})
	took := waitKustomization(t, "rendered-vms", rev, 4*time.Minute)
	t.Logf("Kustomization Ready (wait: true, a running and a stopped VM) %v after it was applied", took.Round(time.Second))
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, "running", testguest.BootPrefix, 3*time.Minute))

	t.Run("drift correction never restarts a VM", func(t *testing.T) {
		pod := podUID(t, ns, "running")
		// A change that applies live, and one that needs a restart. (The
		// guest takes the RAM when the kubelet refreshes its config, as
		// TestArgoCDRendered shows for CPUs; here only the pod counts.)
		// Not CPUs: the next subtest would then boot a guest with two
		// emulated CPUs, which qemu 7.2 under TCG on a loaded node once
		// left stuck in boot (RCU stalls on CPU 1, its timer never fired).
		changed := strings.Replace(running, "currentRam: 512Mi", "currentRam: 384Mi", 1)
		rev := repo.Write("less RAM", map[string]string{"rendered/vms.yaml": renderVMs(t, changed, stopped)})
		reconcileFlux(t, "rendered-vms")
		waitKustomization(t, "rendered-vms", rev, 3*time.Minute)
		changed = strings.Replace(changed, "maximumCpus: 2", "maximumCpus: 3", 1)
		rev = repo.Write("up to 3 CPUs", map[string]string{"rendered/vms.yaml": renderVMs(t, changed, stopped)})
		reconcileFlux(t, "rendered-vms")
		waitKustomization(t, "rendered-vms", rev, 3*time.Minute)
		// And again with nothing changed in Git.
		reconcileFlux(t, "rendered-vms")
		waitKustomization(t, "rendered-vms", rev, 3*time.Minute)
		require.Equal(t, pod, podUID(t, ns, "running"), "the pod was replaced")
		running = changed
	})

	t.Run("kubectl vm stop is undone at the next reconcile", func(t *testing.T) {
		// docs/user-guide/gitops.md: Git wins; Flux puts the replicas back.
		kubectl(t, "", "vm", "stop", "-n", ns, "running", "--wait", "--timeout", "3m")
		reconcileFlux(t, "rendered-vms")
		require.Equal(t, testguest.BootPrefix+"2", waitConsole(t, ns, "running", testguest.BootPrefix+"2", 3*time.Minute))
	})

	t.Run("a VM removed from Git is pruned and its disk stays", func(t *testing.T) {
		rev := repo.Write("no running VM", map[string]string{"rendered/vms.yaml": renderVMs(t, stopped)})
		reconcileFlux(t, "rendered-vms")
		waitKustomization(t, "rendered-vms", rev, 3*time.Minute)
		_, err := node.Client.AppsV1().StatefulSets(ns).Get(t.Context(), "running", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "StatefulSet running: %v", err)
		_, err = node.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), "running", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "ConfigMap running: %v", err)
		_, err = node.Client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "system-disk-running-0", metav1.GetOptions{})
		require.NoError(t, err, "the pruned VM's disk")
		_, err = node.Client.AppsV1().StatefulSets(ns).Get(t.Context(), "stopped", metav1.GetOptions{})
		require.NoError(t, err)
	})
}

// TestFluxOperator: VirtualMachines in Git, applied by a Kustomization with
// wait (examples/flux/virtual-machines.yaml), run by vm-operator. Flux
// judges them with kstatus: the Kustomization is Ready once one VM runs
// and another is stopped, as their specs say.
func TestFluxOperator(t *testing.T) {
	installVmop(t)
	installFlux(t)
	const ns = "flux-operator"
	repo := gitserver.Start(t, testnode.IP).Repo(t, "vms")
	addGuestDisk(t, ns, "running")
	// No volumes for the stopped VM: it claims none, and a volume left
	// Available would bind a later test's claim.
	running := gitopsGuestVM("running", ns)
	stopped := strings.Replace(gitopsGuestVM("stopped", ns), "state: Running", "state: Stopped", 1)
	rev := repo.Write("two VMs", map[string]string{
		"virtual-machines/namespace.yaml": fluxNamespace(ns),
		"virtual-machines/running.yaml":   running,
		"virtual-machines/stopped.yaml":   stopped,
	})
	applyFluxExample(t, repo.URL, "gitrepository.yaml", "virtual-machines.yaml")
	t.Cleanup(func() {
		_, _, _ = kubectlResult(context.Background(), "", "delete", "-n", fluxNS, "kustomizations.kustomize.toolkit.fluxcd.io/virtual-machines", "gitrepositories.source.toolkit.fluxcd.io/vms", "--wait", "--timeout", "4m")
		_, _, _ = kubectlResult(context.Background(), "", "delete", "namespace", ns, "--wait", "--timeout", "4m")
	})
	took := waitKustomization(t, "virtual-machines", rev, 4*time.Minute)
	t.Logf("Kustomization Ready (wait: true, a running and a stopped VirtualMachine) %v after it was applied", took.Round(time.Second))
	s := vmStatus(t, ns, "running")
	require.NotEmpty(t, s.Node, "the running VM's status after the Kustomization was Ready: %+v", s)
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, "running", testguest.BootPrefix, 3*time.Minute))

	t.Run("a change from Git", func(t *testing.T) {
		pod := podUID(t, ns, "running")
		rev := repo.Write("2 CPUs", map[string]string{
			"virtual-machines/running.yaml": strings.Replace(running, "currentCpus: 1", "currentCpus: 2", 1),
		})
		reconcileFlux(t, "virtual-machines")
		waitKustomization(t, "virtual-machines", rev, 3*time.Minute)
		waitConsole(t, ns, "running", testguest.CPUsPrefix+"2", 3*time.Minute)
		require.Equal(t, pod, podUID(t, ns, "running"), "the pod was replaced")
	})

	t.Run("a failed VM fails the Kustomization at once", func(t *testing.T) {
		// A tap NIC needs a privileged pod, which the namespace refuses.
		refused := strings.Replace(gitopsGuestVM("refused", ns), "    disks:\n", "    networks:\n    - tap: {bridge: vmoptbr9}\n    disks:\n", 1)
		repo.Write("a VM that cannot run here", map[string]string{"virtual-machines/refused.yaml": refused})
		asked := time.Now()
		reconcileFlux(t, "virtual-machines")
		// Well before the Kustomization's timeout (5m).
		waitFlux(t, "virtual-machines", 2*time.Minute, func(k fluxKustomization) string {
			// Flux names the VM; kubectl vm status says why.
			if r := k.ready(); r.Status != metav1.ConditionFalse || !strings.Contains(r.Message, "failed early") ||
				!strings.Contains(r.Message, "VirtualMachine/"+ns+"/refused status: 'Failed'") {
				return "not failed early for the VM refused"
			}
			return ""
		})
		t.Logf("the Kustomization failed %v after the reconcile was asked for: %s", time.Since(asked).Round(time.Second), readyMessage(t, "virtual-machines"))
	})
}

// readyMessage is the Kustomization's Ready condition's message.
func readyMessage(t *testing.T, name string) string {
	out := kubectl(t, "", "get", "kustomizations.kustomize.toolkit.fluxcd.io", "-n", fluxNS, name, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].message}")
	return out
}
