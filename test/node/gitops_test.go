package node

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/spicetest"
	"github.com/vmop/vmop/test/harness/testguest"
)

// TestGitOpsJourney is the journey without the operator: the rendered
// objects are applied as Argo CD or Flux would, and the plugin's commands
// change them.
func TestGitOpsJourney(t *testing.T) {
	const ns, vm = "gitops", "guest"
	createNamespace(t, ns)
	grantRunner(t, ns)
	disk := addGuestDisk(t, ns, vm, testguest.Screen)
	addImageRepository(t, ns)
	file := filepath.Join(t.TempDir(), "vm.yaml")
	manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "state: Stopped", "state: Running", 1)
	require.NoError(t, os.WriteFile(file, []byte(manifest), 0o644))

	rendered := kubectl(t, "", "vm", "render", "--service-account", install.RunnerServiceAccount, "-f", file)
	start := time.Now()
	kubectl(t, rendered, "apply", "-f", "-")
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 3*time.Minute))
	t.Logf("kubectl apply to the guest's first line: %v", time.Since(start).Round(time.Millisecond))
	waitConsole(t, ns, vm, testguest.ReadyLine, time.Minute)

	status := kubectl(t, "", "vm", "status", "-n", ns, vm)
	require.Contains(t, status, "Running", "kubectl vm status")

	t.Run("live changes", func(t *testing.T) {
		pod := podUID(t, ns, vm)
		liveChanges(t, ns, vm, false)
		require.Equal(t, pod, podUID(t, ns, vm), "the pod was replaced")
	})

	// Rendered for Git, the VM started without a display Secret: its
	// display is locked to every pod, and the console gets in at once.
	t.Run("locked display", func(t *testing.T) {
		requireLocked(t, ns, vm)
		consoleLogin(t, ns, vm)
	})

	t.Run("browser console", func(t *testing.T) { gitopsBrowserConsole(t, ns, vm) })

	t.Run("stop and start", func(t *testing.T) {
		exit := watchRunnerExit(t, ns, vm)
		kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "3m")
		select {
		case code := <-exit:
			require.Equal(t, int32(0), code, "the runner's exit code")
		case <-time.After(10 * time.Second):
			t.Fatal("the runner's exit was not seen")
		}
		requireEvents(t, ns, "statefulset/"+vm, "ShutdownRequested", "Pressed the ACPI power button",
			"ShutdownCompleted", "after it was asked to")
		kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
		require.Equal(t, testguest.BootPrefix+"2", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute))
	})

	// Git wins: deleting the rendered objects (what a sync does when the
	// VM leaves Git) keeps the disk.
	kubectl(t, rendered, "delete", "-f", "-", "--wait", "--timeout", "3m")
	eventually.Within(t, 2*time.Minute, func() string {
		if _, _, err := kubectlResult(t.Context(), "", "get", "pod", "-n", ns, vm+"-0"); err == nil {
			return "the pod is still there"
		}
		return ""
	})
	boots, err := testguest.ReadBoots(node.DiskFile(disk))
	require.NoError(t, err)
	require.Equal(t, 2, boots)
}

// requireLocked checks that no password, or a guessed one, opens the VM's
// SPICE display from the node, which reaches the pod's address as any pod
// of the cluster does.
func requireLocked(t *testing.T, ns, vm string) {
	t.Helper()
	pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-0", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, pod.Status.PodIP)
	var port int32
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if c.Name == render.ContainerRunner && p.Name == render.PortSpice {
				port = p.ContainerPort
			}
		}
	}
	require.NotZero(t, port, "the runner's SPICE port")
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port)))
	for _, password := range []string{"", "guess"} {
		ok, err := spicetest.Login(t.Context(), addr, password)
		require.NoError(t, err, "SPICE at the pod's address %s", addr)
		require.False(t, ok, "the display at %s took the password %q", addr, password)
	}
}

// grantRunner gives the runner pods of namespace ns an identity, as
// docs/runner.md says for GitOps mode: the ServiceAccount vm-runner (kubectl vm
// render --service-account vm-runner) bound to the ClusterRole vm-runner,
// which the journey makes when no kubectl vm install did.
func grantRunner(t testing.TB, ns string) {
	t.Helper()
	role, err := install.NewClusterRole(install.RunnerClusterRole)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = node.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	sa, rb := install.RunnerAccess(ns)
	_, err = node.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = node.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{})
	require.NoError(t, err)
}
