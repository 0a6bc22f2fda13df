package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// TestFirstClusterPrerequisites is a newcomer's first VM, written like
// VM-Operator's example (an empty CD drive), on a cluster that lacks what
// vmop asks of it: a default StorageClass and the namespace's image
// repository. kubectl vm status names each missing piece and what to
// create, one after the other as the scheduler meets them, and once they
// are made the VM runs, with nothing else done to it.
func TestFirstClusterPrerequisites(t *testing.T) {
	const ns, vm = "newcomer", "test-vm"
	installVmop(t)
	createNamespace(t, ns)
	// The node's volumes for the disk and the runner's data; the claims
	// only find them once they have a class.
	addGuestDisk(t, ns, vm)
	setDefaultClass(t, "false")
	t.Cleanup(func() { setDefaultClass(t, "true") })

	kubectl(t, strings.Replace(fmt.Sprintf(guestVM, vm, ns), "state: Stopped", "state: Running", 1), "apply", "-f", "-")

	// statusSays waits until kubectl vm status shows the Failed condition
	// with reason, and returns what it shows.
	statusSays := func(reason string) string {
		t.Helper()
		shown := regexp.MustCompile(`Failed\s+True\s+` + reason)
		var out string
		eventually.Within(t, 2*time.Minute, func() string {
			out = kubectl(t, "", "vm", "status", "-n", ns, vm)
			if shown.MatchString(out) {
				return ""
			}
			return "kubectl vm status does not show " + reason + " (yet):\n" + out
		})
		return out
	}

	out := statusSays(v1.ReasonImageRepositoryMissing)
	t.Log(statusLine(out))
	require.Contains(t, out, "Status:", "the status line")
	require.Regexp(t, `Status:\s+ImageRepositoryMissing: The VM has a CD drive, so its pod mounts the namespace's image repository, `+
		`the PersistentVolumeClaim vmop-image-repository, and namespace newcomer has none\. Create it`, out)
	// The operator's event on the VM says it too (kubectl describe vm).
	requireEvents(t, ns, "vm/"+vm, v1.ReasonImageRepositoryMissing, "PersistentVolumeClaim vmop-image-repository")
	t.Logf("the scheduler: %s", scheduledMessage(t, ns, vm))

	// The claim as the docs have the user make it, without a class: it
	// waits for the default class like the runner's data.
	kubectl(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: vmop-image-repository
  namespace: %s
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
`, ns), "apply", "-f", "-")
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: ns + "-images", Size: resource.MustParse("1Gi")}))

	out = statusSays(v1.ReasonNoDefaultStorageClass)
	t.Log(statusLine(out))
	require.Regexp(t, `Status:\s+NoDefaultStorageClass: Claim (vmop-image-repository|runner-data-test-vm-0) names no StorageClass `+
		`and the cluster has no default one`, out)
	t.Logf("the scheduler: %s", scheduledMessage(t, ns, vm))

	// The way out the message gives: a default class. The volume
	// controller gives it to the waiting claims, and the VM starts.
	setDefaultClass(t, "true")
	fixed := time.Now()
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 4*time.Minute))
	t.Logf("a default class to the guest's first line: %v", time.Since(fixed).Round(time.Millisecond))
	eventually.Within(t, time.Minute, func() string {
		out = kubectl(t, "", "vm", "status", "-n", ns, vm)
		if regexp.MustCompile(`Failed\s+False\s+NoFailure`).MatchString(out) && regexp.MustCompile(`Status:\s+Running`).MatchString(out) {
			return ""
		}
		return "kubectl vm status:\n" + out
	})
	requireEvents(t, ns, "vm/"+vm, "Recovered", "The VM no longer fails")
	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "3m")
	deleteVM(t, ns, vm)
}

// TestFirstClusterKubeletRootDir: this node's kubelet keeps its files in
// the harness's directory, not in /var/lib/kubelet. kubectl vm install
// --wait without --kubelet-root-dir says while it waits, not after its
// timeout, that the agent's pod cannot mount the kubelet's pod directory,
// and how to give the right one.
func TestFirstClusterKubeletRootDir(t *testing.T) {
	installVmop(t)
	defer installVmop(t) // the agent as the other tests need it
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := kubectlCmd(ctx, "vm", "install", "--node-agent-only", "--wait", "--timeout", "10m", "--runner-repository", unpullableRepository)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { cancel(); _ = cmd.Wait() }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var said []string
	eventually.Within(t, 3*time.Minute, func() string {
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return "kubectl vm install ended without saying why it waits:\n" + strings.Join(said, "\n")
				}
				said = append(said, l)
				if strings.Contains(l, "hostPath type check failed") {
					return ""
				}
			default:
				return "kubectl vm install has not said why the agent waits:\n" + strings.Join(said, "\n")
			}
		}
	})
	last := said[len(said)-1]
	t.Logf("kubectl vm install --wait, while it waits: %s", last)
	require.Contains(t, last, "daemonset.apps/vm-node waits: pod vm-node-")
	require.Contains(t, last, "/var/lib/kubelet/pods is not a directory")
	require.True(t, strings.HasSuffix(last, "give that directory: kubectl vm install --kubelet-root-dir DIR"), last)
}

// setDefaultClass marks the node's Filesystem class as the cluster's
// default ("true") or not ("false"), as an administrator would.
func setDefaultClass(t testing.TB, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"storageclass.kubernetes.io/is-default-class":%q}}}`, value)
	// Not t.Context(): the cleanup restores it after t ends.
	_, err := node.Client.StorageV1().StorageClasses().Patch(context.Background(), testnode.StorageClassFilesystem,
		types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// scheduledMessage is the scheduler's message on the VM's pod.
func scheduledMessage(t testing.TB, ns, vm string) string {
	t.Helper()
	pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), render.PodName(vm), metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Message
		}
	}
	return ""
}

// statusLine is the Status line of kubectl vm status's output.
func statusLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "Status:") {
			return l
		}
	}
	return ""
}

// TestFirstClusterGitOpsAccount: in GitOps mode, a VM rendered with
// --service-account before the account exists gets no pod; kubectl vm
// status, with no operator, names the account and how to make it, and
// once it is made as it says, the VM boots.
func TestFirstClusterGitOpsAccount(t *testing.T) {
	const ns, vm, account = "newcomer-gitops", "guest", "vm-runner"
	// The ClusterRole vm-runner that the account is bound to.
	installVmop(t)
	createNamespace(t, ns)
	addGuestDisk(t, ns, vm)
	addImageRepository(t, ns)
	file := filepath.Join(t.TempDir(), "vm.yaml")
	require.NoError(t, os.WriteFile(file, []byte(strings.Replace(fmt.Sprintf(guestVM, vm, ns), "state: Stopped", "state: Running", 1)), 0o644))
	rendered := kubectl(t, "", "vm", "render", "--service-account", account, "-f", file)
	kubectl(t, rendered, "apply", "-f", "-")

	var out string
	eventually.Within(t, 2*time.Minute, func() string {
		out = kubectl(t, "", "vm", "status", "-n", ns, vm)
		if strings.Contains(out, "Status:") && strings.Contains(statusLine(out), v1.ReasonServiceAccountMissing) {
			return ""
		}
		return "kubectl vm status does not show " + v1.ReasonServiceAccountMissing + " (yet):\n" + out
	})
	t.Log(statusLine(out))
	require.Regexp(t, `Mode:\s+gitops`, out)
	require.Contains(t, statusLine(out), "The pod runs as ServiceAccount vm-runner, which namespace newcomer-gitops lacks.")

	// What the message says to run.
	kubectl(t, "", "create", "serviceaccount", "-n", ns, account)
	kubectl(t, "", "create", "rolebinding", "-n", ns, account, "--clusterrole", "vm-runner", "--serviceaccount", ns+":"+account)
	fixed := time.Now()
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 4*time.Minute))
	t.Logf("the account to the guest's first line: %v", time.Since(fixed).Round(time.Millisecond))
	require.Regexp(t, `Status:\s+Running`, kubectl(t, "", "vm", "status", "-n", ns, vm))
	kubectl(t, rendered, "delete", "-f", "-", "--wait", "--timeout", "3m")
}
