package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/vm-runner/configwatch"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/gitops"
	"github.com/vmop/vmop/test/harness/gitserver"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// argoNS is where the tests install Argo CD, as its docs do.
const argoNS = "argocd"

var argoInstall once

// installArgoCD installs Argo CD (once per test binary) as a user would,
// and runs it while t runs:
// examples/argocd/kustomization.yaml, which adds vmop's component
// (examples/argocd/vmop: the kubectl-vm plugin and the health check) to
// Argo CD's own install.yaml. The test changes only what this node needs:
// install.yaml from the built release rather than GitHub, the images
// built here (test/harness/gitops), which are imported, not pulled, and no
// GnuPG. Dex, ApplicationSets and notifications are not started; the API
// server is (it makes the default AppProject), its UI is empty.
func installArgoCD(t *testing.T) {
	t.Helper()
	argoInstall.do(t, func() {
		example, err := os.ReadFile("../../examples/argocd/kustomization.yaml")
		require.NoError(t, err)
		const upstream = "https://raw.githubusercontent.com/argoproj/argo-cd/v3.1.16/manifests/install.yaml"
		k := string(example)
		require.Contains(t, k, upstream)
		require.Contains(t, k, "- vmop\n")
		require.Contains(t, k, "newTag: v0.1.0\n")
		k = strings.Replace(k, upstream, "install.yaml", 1)
		k = strings.Replace(k, "newTag: v0.1.0\n", "newTag: devel\n", 1)
		k += fmt.Sprintf(`- name: quay.io/argoproj/argocd
  newName: %s
  newTag: %s
- name: public.ecr.aws/docker/library/redis
  newName: %s
  newTag: %s
patches:
- path: test.yaml
`, imageName(gitops.ArgoCDImage), imageTag(gitops.ArgoCDImage), imageName(gitops.RedisImage), imageTag(gitops.RedisImage))
		// The component beside it, as in examples/argocd: kustomize loads
		// none by an absolute path.
		dir := t.TempDir()
		out, err := exec.Command("cp", "-r", "../../examples/argocd/vmop", dir).CombinedOutput()
		require.NoError(t, err, "%s", out)
		install, err := os.ReadFile(filepath.Join(gitopsBuild.Manifests(), "argocd", "install.yaml"))
		require.NoError(t, err)
		var test strings.Builder
		for _, d := range []string{"argocd-dex-server", "argocd-applicationset-controller", "argocd-notifications-controller"} {
			fmt.Fprintf(&test, "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: %s\nspec:\n  replicas: 0\n---\n", d)
		}
		// Argo CD 3 keeps each resource's health out of the Application's
		// status unless asked to: the tests read it there.
		test.WriteString(`apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cmd-params-cm
data:
  controller.resource.health.persist: "true"
---
`)
		// The image has gpg but not upstream's gpg-wrapper.sh, which the repo
		// server runs at its start when GnuPG is on; nothing here signs.
		test.WriteString(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: argocd-repo-server
spec:
  template:
    spec:
      containers:
      - name: argocd-repo-server
        env:
        - name: ARGOCD_GPG_ENABLED
          value: "false"
`)
		for name, content := range map[string]string{
			"kustomization.yaml": k, "install.yaml": string(install), "test.yaml": test.String(),
		} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
		}
		manifests := kubectl(t, "", "kustomize", dir)
		// Argo CD's manifests pull always; this node has no registry.
		manifests = strings.ReplaceAll(manifests, "imagePullPolicy: Always", "imagePullPolicy: IfNotPresent")
		kubectl(t, "", "create", "namespace", argoNS)
		// Server-side, as Argo CD's docs say: its CRDs are too big for the
		// last-applied annotation.
		kubectl(t, manifests, "apply", "-n", argoNS, "--server-side", "--force-conflicts", "-f", "-")
	})
	runWorkloads(t, argoNS, "deployment/argocd-repo-server", "deployment/argocd-redis", "deployment/argocd-server",
		"statefulset/argocd-application-controller")
}

// imageName and imageTag split an image reference name:tag (no registry
// port) for kustomize's images.
func imageName(ref string) string { n, _, _ := strings.Cut(ref, ":"); return n }
func imageTag(ref string) string  { _, t, _ := strings.Cut(ref, ":"); return t }

// argoResource is one resource of an Application's status.
type argoResource struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Status    string `json:"status"`
	Health    *struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	} `json:"health"`
}

// argoApp is what the tests read of an Argo CD Application.
type argoApp struct {
	Spec struct {
		SyncPolicy struct {
			Automated *struct {
				SelfHeal bool `json:"selfHeal"`
			} `json:"automated"`
		} `json:"syncPolicy"`
	} `json:"spec"`
	Status struct {
		Sync struct {
			Status   string `json:"status"`
			Revision string `json:"revision"`
		} `json:"sync"`
		Health struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"health"`
		OperationState *struct {
			Phase   string `json:"phase"`
			Message string `json:"message"`
		} `json:"operationState"`
		Resources []argoResource `json:"resources"`
		History   []struct {
			ID       int64  `json:"id"`
			Revision string `json:"revision"`
		} `json:"history"`
		Conditions []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

func getArgoApp(t *testing.T, name string) (argoApp, error) {
	var a argoApp
	out, errOut, err := kubectlResult(t.Context(), "", "get", "application", "-n", argoNS, name, "-o", "json")
	if err != nil {
		return a, fmt.Errorf("%w: %s", err, errOut)
	}
	return a, json.Unmarshal([]byte(out), &a)
}

// summary is one line of an Application's state, for failure messages.
func (a argoApp) summary() string {
	s := fmt.Sprintf("sync %s at %.8s, health %s %q", a.Status.Sync.Status, a.Status.Sync.Revision, a.Status.Health.Status, a.Status.Health.Message)
	if op := a.Status.OperationState; op != nil {
		s += fmt.Sprintf(", last operation %s: %s", op.Phase, op.Message)
	}
	for _, c := range a.Status.Conditions {
		s += fmt.Sprintf(", condition %s: %s", c.Type, c.Message)
	}
	for _, r := range a.Status.Resources {
		h := ""
		if r.Health != nil {
			h = " " + r.Health.Status + " " + r.Health.Message
		}
		s += fmt.Sprintf("\n  %s %s/%s %s%s", r.Kind, r.Namespace, r.Name, r.Status, h)
	}
	return s
}

// resourceHealth is the health Argo CD shows for the application's
// resource of kind and name, "" when it shows none.
func (a argoApp) resourceHealth(kind, name string) string {
	for _, r := range a.Status.Resources {
		if r.Kind == kind && r.Name == name && r.Health != nil {
			return r.Health.Status
		}
	}
	return ""
}

func (a argoApp) hasResource(kind, name string) bool {
	return slices.ContainsFunc(a.Status.Resources, func(r argoResource) bool {
		return r.Kind == kind && r.Name == name
	})
}

// waitApp waits until check finds nothing wrong with the Application.
func waitApp(t *testing.T, name string, timeout time.Duration, check func(a argoApp) string) argoApp {
	t.Helper()
	var a argoApp
	eventually.Within(t, timeout, func() string {
		var err error
		if a, err = getArgoApp(t, name); err != nil {
			return err.Error()
		}
		if problem := check(a); problem != "" {
			return fmt.Sprintf("Application %s: %s\n%s", name, problem, a.summary())
		}
		return ""
	})
	return a
}

// syncedAt: the Application is Synced and Healthy at revision.
func syncedAt(revision string) func(a argoApp) string {
	return func(a argoApp) string {
		switch {
		case a.Status.Sync.Revision != revision:
			return "not at revision " + revision
		case a.Status.Sync.Status != "Synced":
			return "not Synced"
		case a.Status.Health.Status != "Healthy":
			return "not Healthy"
		}
		return ""
	}
}

// refreshApp asks Argo CD to look at Git now, as its webhook or the
// Refresh button does, rather than at its next poll (3 minutes).
func refreshApp(t *testing.T, name string) {
	t.Helper()
	kubectl(t, "", "annotate", "application", "-n", argoNS, name, "argocd.argoproj.io/refresh=normal", "--overwrite")
}

// applyApplication applies the example Application file with the test's
// repository and destination namespace.
func applyApplication(t *testing.T, file, repoURL, ns string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../examples/argocd", file))
	require.NoError(t, err)
	app := string(b)
	require.Contains(t, app, "repoURL: https://git.example/vms.git\n")
	app = strings.Replace(app, "repoURL: https://git.example/vms.git\n", "repoURL: "+repoURL+"\n", 1)
	var dest struct {
		Metadata struct{ Name string }
		Spec     struct{ Destination struct{ Namespace string } }
	}
	require.NoError(t, yaml.Unmarshal([]byte(app), &dest))
	app = strings.Replace(app, "  namespace: "+dest.Spec.Destination.Namespace+"\n", "  namespace: "+ns+"\n", 1)
	kubectl(t, app, "apply", "-f", "-")
	t.Cleanup(func() {
		// The example has no resources finalizer: deleting the
		// Application leaves what it synced, which the namespace's
		// deletion removes.
		_, _, _ = kubectlResult(context.Background(), "", "delete", "application", "-n", argoNS, dest.Metadata.Name, "--wait", "--timeout", "2m")
		_, _, _ = kubectlResult(context.Background(), "", "delete", "namespace", ns, "--wait", "--timeout", "4m")
	})
	return dest.Metadata.Name
}

// gitopsGuestVM is the test guest as a VM kept in Git: running, no CD
// drive, in namespace ns. It requests a tenth of a CPU: the node's two
// would not fit the default requests of several VMs beside Argo CD.
func gitopsGuestVM(vm, ns string) string {
	m := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "state: Stopped", "state: Running", 1)
	m = strings.Replace(m, "spec:\n  vm:\n", "spec:\n  resources:\n    requests:\n      cpu: 100m\n  vm:\n", 1)
	return strings.Replace(m, "    - cdrom:\n        image: \"\"\n", "", 1)
}

// TestArgoCDRendered is GitOps mode with the real Argo CD: VirtualMachine
// manifests in Git, rendered by the kubectl-vm plugin in the repo
// server's sidecar (examples/argocd), synced by an automated Application
// (examples/argocd/application.yaml) without vm-operator.
func TestArgoCDRendered(t *testing.T) {
	installArgoCD(t)
	const ns = "argo-rendered"
	repo := gitserver.Start(t, testnode.IP).Repo(t, "vms")
	vms := []string{"alpha", "beta"}
	files := map[string]string{}
	for _, vm := range vms {
		addGuestDisk(t, ns, vm)
		files["vms/"+vm+".yaml"] = gitopsGuestVM(vm, ns)
	}
	// Git holds other files too: the plugin renders VMs and passes
	// other manifests through; other files it leaves alone.
	files["vms/README.md"] = "# VMs\n"
	files["vms/hello.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello\n  namespace: %s\ndata:\n  greeting: hello\n", ns)
	first := repo.Write("two VMs", files)
	start := time.Now()
	app := applyApplication(t, "application.yaml", repo.URL, ns)

	a := waitApp(t, app, 6*time.Minute, syncedAt(first))
	t.Logf("Application Synced and Healthy %v after its creation", time.Since(start).Round(time.Second))
	for _, vm := range vms {
		require.Equal(t, "Healthy", a.resourceHealth("StatefulSet", vm), a.summary())
		require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 3*time.Minute))
	}
	require.True(t, a.hasResource("ConfigMap", "hello"), a.summary())
	labels, err := node.Client.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "restricted", labels.Labels["pod-security.kubernetes.io/enforce"], "the namespace Argo CD made")

	t.Run("a live change from Git", func(t *testing.T) {
		pod := podUID(t, ns, "alpha")
		m := strings.Replace(gitopsGuestVM("alpha", ns), "currentCpus: 1", "currentCpus: 2", 1)
		// The ConfigMap's change is timed by a watch of it, started first.
		cms := node.Client.CoreV1().ConfigMaps(ns)
		cm, err := cms.Get(t.Context(), "alpha", metav1.GetOptions{})
		require.NoError(t, err)
		watch, err := cms.Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=alpha", ResourceVersion: cm.ResourceVersion})
		require.NoError(t, err)
		defer watch.Stop()
		rev := repo.Write("alpha: 2 CPUs", map[string]string{"vms/alpha.yaml": m})
		committed := time.Now()
		refreshApp(t, app)
		var changed time.Time
		for changed.IsZero() {
			select {
			case ev, ok := <-watch.ResultChan():
				require.True(t, ok, "the watch of ConfigMap alpha ended")
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok && strings.Contains(cm.Data["config.yaml"], "currentCpus: 2") {
					changed = time.Now()
				}
			case <-time.After(3 * time.Minute):
				t.Fatal("Argo CD did not change ConfigMap alpha within 3 minutes")
			}
		}
		// The runner watches its ConfigMap (the Role render writes), so the
		// change does not wait for the kubelet's refresh of the volume.
		waitConsole(t, ns, "alpha", testguest.CPUsPrefix+"2", 3*time.Minute)
		seen := time.Now()
		set, ok := runnerLogTime(t, ns, "alpha", "CPUs set", committed)
		require.True(t, ok, "the runner's log says when it set the CPUs")
		t.Logf("commit to the ConfigMap changed: %v; from there to the runner's CPU plug: %v, to the guest's second CPU on its console: %v",
			changed.Sub(committed).Round(100*time.Millisecond), set.Sub(changed).Round(10*time.Millisecond), seen.Sub(changed).Round(100*time.Millisecond))
		require.NotEmpty(t, runnerLogAttrs(t, ns, "alpha", configwatch.Following, "configMap"), "the runner follows its ConfigMap through the API server")
		// The guest can be faster than Argo CD's sync: wait for its end
		// (its history), from which requireNoDrift counts.
		waitApp(t, app, 3*time.Minute, func(a argoApp) string {
			if h := a.Status.History; len(h) == 0 || h[len(h)-1].Revision != rev {
				return "the sync of " + rev + " is not in the history yet"
			}
			return syncedAt(rev)(a)
		})
		require.Equal(t, pod, podUID(t, ns, "alpha"), "the pod was replaced")
		requireNoDrift(t, app, rev)
	})

	t.Run("a change that needs a restart", func(t *testing.T) {
		pod := podUID(t, ns, "alpha")
		m := strings.Replace(gitopsGuestVM("alpha", ns), "currentCpus: 1", "currentCpus: 2", 1)
		m = strings.Replace(m, "maximumCpus: 2", "maximumCpus: 3", 1)
		rev := repo.Write("alpha: up to 3 CPUs", map[string]string{"vms/alpha.yaml": m})
		refreshApp(t, app)
		// Synced and Healthy, as docs/user-guide/gitops.md says: the
		// StatefulSet's OnDelete strategy keeps the VM running.
		waitApp(t, app, 3*time.Minute, syncedAt(rev))
		require.Equal(t, pod, podUID(t, ns, "alpha"), "the pod was replaced")
		eventually.Within(t, time.Minute, func() string {
			out := kubectl(t, "", "vm", "status", "-n", ns, "alpha")
			if !strings.Contains(out, "stop and start the VM to apply it") {
				return "kubectl vm status does not say a restart is needed:\n" + out
			}
			return ""
		})
		requireNoDrift(t, app, rev)
	})

	t.Run("a VM removed from Git is pruned and its disk stays", func(t *testing.T) {
		rev := repo.Write("no beta", map[string]string{"vms/beta.yaml": ""})
		refreshApp(t, app)
		waitApp(t, app, 3*time.Minute, func(a argoApp) string {
			if p := syncedAt(rev)(a); p != "" {
				return p
			}
			if a.hasResource("StatefulSet", "beta") {
				return "beta is still a resource"
			}
			return ""
		})
		eventually.Within(t, 3*time.Minute, func() string {
			_, err := node.Client.AppsV1().StatefulSets(ns).Get(t.Context(), "beta", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Sprintf("StatefulSet beta: %v", err)
			}
			_, err = node.Client.CoreV1().Pods(ns).Get(t.Context(), "beta-0", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Sprintf("pod beta-0: %v", err)
			}
			return ""
		})
		_, err := node.Client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "system-disk-beta-0", metav1.GetOptions{})
		require.NoError(t, err, "beta's disk")
	})

	t.Run("kubectl vm stop with self-heal", func(t *testing.T) {
		// docs/user-guide/gitops.md: Argo CD undoes the stop and the VM
		// starts again; commit state: Stopped to stop it for good.
		out, errOut, err := kubectlResult(t.Context(), "", "vm", "stop", "-n", ns, "alpha")
		require.NoError(t, err, errOut)
		require.Contains(t, out+errOut, "next sync", "kubectl vm stop's warning")
		require.Equal(t, testguest.BootPrefix+"2", waitConsole(t, ns, "alpha", testguest.BootPrefix+"2", 4*time.Minute))
		a, err := getArgoApp(t, app)
		require.NoError(t, err)
		waitApp(t, app, 2*time.Minute, syncedAt(a.Status.Sync.Revision))
	})

	t.Run("kubectl vm stop without self-heal", func(t *testing.T) {
		kubectl(t, "", "patch", "application", "-n", argoNS, app, "--type", "merge", "-p", `{"spec":{"syncPolicy":{"automated":{"selfHeal":false}}}}`)
		kubectl(t, "", "vm", "stop", "-n", ns, "alpha", "--wait", "--timeout", "3m")
		// The VM stays stopped, and Argo CD says it differs from Git.
		waitApp(t, app, 2*time.Minute, func(a argoApp) string {
			if a.Status.Sync.Status != "OutOfSync" {
				return "not OutOfSync"
			}
			return ""
		})
		time.Sleep(15 * time.Second)
		_, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), "alpha-0", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "alpha's pod after the stop: %v", err)
		kubectl(t, "", "vm", "start", "-n", ns, "alpha", "--wait", "--timeout", "3m")
		a, err := getArgoApp(t, app)
		require.NoError(t, err)
		waitApp(t, app, 2*time.Minute, syncedAt(a.Status.Sync.Revision))
	})
}

// requireNoDrift: once synced at rev, the Application stays Synced on a
// hard refresh (Argo CD renders and compares again), with no sync beyond
// the one it made.
func requireNoDrift(t *testing.T, app, rev string) {
	t.Helper()
	a, err := getArgoApp(t, app)
	require.NoError(t, err)
	syncs := len(a.Status.History)
	kubectl(t, "", "annotate", "application", "-n", argoNS, app, "argocd.argoproj.io/refresh=hard", "--overwrite")
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		a, err = getArgoApp(t, app)
		require.NoError(t, err)
		require.Equal(t, "Synced", a.Status.Sync.Status, "drift after a sync: %s", a.summary())
		require.Equal(t, rev, a.Status.Sync.Revision)
		time.Sleep(time.Second)
	}
	require.Len(t, a.Status.History, syncs, "Argo CD synced again: %s", a.summary())
}

// TestArgoCDOperator: VirtualMachines in Git, synced by Argo CD as they
// are (examples/argocd/application-operator.yaml) and run by vm-operator;
// Argo CD itself judges their health with vmop's health check, as
// docs/user-guide/gitops.md's table says.
func TestArgoCDOperator(t *testing.T) {
	installVmop(t)
	installArgoCD(t)
	const ns = "argo-operator"
	repo := gitserver.Start(t, testnode.IP).Repo(t, "vms")
	// The running guest ignores the power button, so that its stop takes
	// its powerdownTimeout.
	addGuestDisk(t, ns, "running", testguest.IgnoreACPI)
	// No volumes for the stopped VM: it claims none, and a volume left
	// Available would bind a later test's claim.
	running := strings.Replace(gitopsGuestVM("running", ns), "powerdownTimeout: 60", "powerdownTimeout: 20", 1)
	files := map[string]string{
		"virtual-machines/running.yaml": running,
		"virtual-machines/stopped.yaml": strings.Replace(gitopsGuestVM("stopped", ns), "state: Running", "state: Stopped", 1),
		// A tap NIC needs a privileged pod, which the namespace refuses.
		"virtual-machines/refused.yaml": strings.Replace(gitopsGuestVM("refused", ns), "    disks:\n",
			"    networks:\n    - tap: {bridge: vmoptbr9}\n    disks:\n", 1),
	}
	rev := repo.Write("three VMs", files)
	app := applyApplication(t, "application-operator.yaml", repo.URL, ns)
	want := map[string]string{"running": "Healthy", "stopped": "Healthy", "refused": "Degraded"}
	a := waitApp(t, app, 6*time.Minute, func(a argoApp) string {
		if a.Status.Sync.Status != "Synced" || a.Status.Sync.Revision != rev {
			return "not Synced at " + rev
		}
		for vm, h := range want {
			if got := a.resourceHealth("VirtualMachine", vm); got != h {
				return fmt.Sprintf("VirtualMachine %s is %q, not %s", vm, got, h)
			}
		}
		return ""
	})
	require.Equal(t, "Degraded", a.Status.Health.Status, "the Application's health is its worst VM's")
	t.Log(a.summary())

	t.Run("a change that needs a restart is Suspended", func(t *testing.T) {
		pod := podUID(t, ns, "running")
		m := strings.Replace(running, "maximumCpus: 2", "maximumCpus: 3", 1)
		rev := repo.Write("running: up to 3 CPUs", map[string]string{"virtual-machines/running.yaml": m})
		refreshApp(t, app)
		a := waitApp(t, app, 3*time.Minute, func(a argoApp) string {
			if a.Status.Sync.Status != "Synced" || a.Status.Sync.Revision != rev {
				return "not Synced at " + rev
			}
			if got := a.resourceHealth("VirtualMachine", "running"); got != "Suspended" {
				return fmt.Sprintf("VirtualMachine running is %q, not Suspended", got)
			}
			return ""
		})
		t.Log(a.summary())
		require.Equal(t, pod, podUID(t, ns, "running"), "the pod was replaced")
		requireNoDrift(t, app, rev)
		running = m
	})

	t.Run("a stop is Progressing until the VM is stopped", func(t *testing.T) {
		rev := repo.Write("running: stop", map[string]string{
			"virtual-machines/running.yaml": strings.Replace(running, "state: Running", "state: Stopped", 1),
		})
		refreshApp(t, app)
		a := waitApp(t, app, 2*time.Minute, func(a argoApp) string {
			if a.Status.Sync.Revision != rev {
				return "not at " + rev
			}
			if got := a.resourceHealth("VirtualMachine", "running"); got != "Progressing" {
				return fmt.Sprintf("VirtualMachine running is %q, not Progressing", got)
			}
			return ""
		})
		t.Log(a.summary())
		waitApp(t, app, 3*time.Minute, func(a argoApp) string {
			if got := a.resourceHealth("VirtualMachine", "running"); got != "Healthy" {
				return fmt.Sprintf("VirtualMachine running is %q, not Healthy", got)
			}
			return ""
		})
	})
}
