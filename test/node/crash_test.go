package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// TestNodeCrash: every process of the node is SIGKILLed at once (the
// kubelet, containerd, its shims, every container's processes, kube-proxy)
// while the guest writes synced records to a Block and a Filesystem data
// disk, and the node is booted. Every record the guest was told is synced
// is on both disks, and the VM, whose spec says Running, comes back by
// itself. The control plane keeps running: it stands for the control
// plane's own nodes, which this worker's crash does not reach.
//
// What this proves, and what not: the host's page cache survives a
// process kill, so this is not a power loss, and no host sync is needed
// or done. It proves that nothing the guest was told is synced was held
// only in qemu's or the runner's memory: a guest's flush reached the
// host's kernel before the guest heard back. That it also reaches the
// platter on a power loss rests on the drives' cache settings, which the
// qemu template documents: they make a guest's flush an fdatasync on the
// host.
func TestNodeCrash(t *testing.T) {
	const ns, vm = "crash", "crashed"
	// 128 MiB per disk (sparse): still writing when the node crashes.
	const records = 2048
	const size = "128Mi"
	installVmop(t)
	createNamespace(t, ns)
	addImageRepository(t, ns)
	addGuestDisk(t, ns, vm, testguest.Records(records))
	block, fs := ns+"-"+vm+"-block", ns+"-"+vm+"-fs"
	require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
		Name: block, Size: resource.MustParse(size), Labels: map[string]string{"disk": block},
	}))
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
		Name: fs, Size: resource.MustParse(size), Labels: map[string]string{"disk": fs},
	}))
	manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "    - cdrom:\n",
		diskClaim("block", testnode.StorageClassBlock, "Block", block, size)+diskClaim("fs", testnode.StorageClassFilesystem, "Filesystem", fs, size)+"    - cdrom:\n", 1)
	kubectl(t, manifest, "apply", "-f", "-")
	defer deleteVM(t, ns, vm)
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute))

	var before int
	eventually.Within(t, 2*time.Minute, func() string {
		log, err := consoleLog(t.Context(), ns, vm)
		if err != nil {
			return err.Error()
		}
		if before = testguest.AckedRecords(log); before >= 20 {
			return ""
		}
		return fmt.Sprintf("%d records acknowledged; the console says:\n%s", before, log)
	})
	// Where the runner keeps the console's output, to read it once the
	// runner is dead: its root file system, still mounted on the node
	// (the crash kills processes, it unmounts nothing).
	history := runnerHistoryDir(t, ns, vm)

	crashed := time.Now()
	require.NoError(t, node.Crash())
	log, err := serialconsole.ReadHistory(history)
	require.NoError(t, err, "the dead runner's console output")
	acked := testguest.AckedRecords(string(log))
	require.GreaterOrEqual(t, acked, before)
	require.NotContains(t, string(log), testguest.RecordsDoneLine, "the guest wrote every record before the crash: give it more")
	// Right after the kill, before the boot, whose guest writes again.
	for _, disk := range []string{node.DiskFile(block), filepath.Join(node.VolumePath(fs), vmpod.DiskFileName)} {
		f, err := os.Open(disk)
		require.NoError(t, err)
		lost, err := testguest.LostRecords(f, acked)
		f.Close()
		require.NoError(t, err)
		require.Empty(t, lost, "records the guest was told are synced that are not in %s", disk)
	}

	require.NoError(t, node.Boot(t.Context()))
	booted := time.Since(crashed)
	// The VM comes back by itself: a new runner, and the guest boots again
	// from the same disk.
	require.Equal(t, testguest.BootPrefix+"2", waitConsole(t, ns, vm, testguest.BootPrefix, 5*time.Minute))
	back := time.Since(crashed)
	eventually.Within(t, 2*time.Minute, func() string {
		if out := kubectl(t, "", "vm", "status", "-n", ns, vm); !strings.Contains(out, "Running") {
			return "kubectl vm status:\n" + out
		}
		return ""
	})
	waitNodeAgent(t, crashed)
	t.Logf("node crash: %d records acknowledged, 0 lost on Block and Filesystem, VM back after %.1f s (node booted after %.1f s)",
		acked, back.Seconds(), booted.Seconds())
}

// runnerHistoryDir is the directory of the VM's console output in the
// runner's root file system, as the node's containerd mounts it.
func runnerHistoryDir(t testing.TB, ns, vm string) string {
	t.Helper()
	pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-0", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, pod.Status.ContainerStatuses)
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	pid, err := node.Containerd.PID(t.Context(), id)
	require.NoError(t, err)
	fi, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	require.NoError(t, err)
	uid := fi.Sys().(*syscall.Stat_t).Uid
	dir := filepath.Join(node.Containerd.Dir, "state", "io.containerd.runtime.v2.task", "k8s.io", id, "rootfs",
		"tmp", fmt.Sprintf("vmrunner-%d", uid), vm)
	_, err = serialconsole.ReadHistory(dir)
	require.NoError(t, err, "the runner's console output on the node")
	return dir
}

// waitNodeAgent waits until vmop's node agent runs again, started after
// since, the node offers its device resource and is Ready and untainted:
// the tests after this one need the node as it was.
func waitNodeAgent(t testing.TB, since time.Time) {
	t.Helper()
	eventually.Within(t, 3*time.Minute, func() string {
		pods, err := node.Client.CoreV1().Pods("vmop-system").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		agents := 0
		for _, p := range pods.Items {
			if !strings.HasPrefix(p.Name, "vm-node-") {
				continue
			}
			agents++
			for _, c := range p.Status.ContainerStatuses {
				if !c.Ready || c.State.Running == nil || c.State.Running.StartedAt.Time.Before(since.Truncate(time.Second)) {
					return fmt.Sprintf("the agent's container %s of pod %s has not started again: %+v", c.Name, p.Name, c.State)
				}
			}
		}
		if agents != 1 {
			return fmt.Sprintf("%d agent pods", agents)
		}
		n, err := node.Client.CoreV1().Nodes().Get(t.Context(), testnode.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if q, ok := n.Status.Allocatable[nodeagent.Resource]; !ok || q.IsZero() {
			return "the node offers no " + nodeagent.Resource
		}
		if err := testnode.Schedulable(n); err != nil {
			return "the node takes no pods: " + err.Error()
		}
		return ""
	})
}
