package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/headless"
	"github.com/vmop/vmop/test/harness/spicetest"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// guestVMHead opens a VirtualMachine of the test guest: 1 name, 2
// namespace; the lines of its spec.vm follow.
const guestVMHead = `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  vm:
`

// guestMachine is the test guest's RAM and firmware in spec.vm, then the
// start of its system disk's claim template: the claim's spec follows.
const guestMachine = `    maximumRam: 512Mi
    currentRam: 512Mi
    powerdownTimeout: 60
    firmware: bios
    disks:
    - volumeClaimTemplate:
        metadata:
          name: system
        spec:
`

// guestVM is the test guest as a VirtualMachine: it boots from its Block
// disk (testguest.Disk) with SeaBIOS and counts its boots there.
const guestVM = guestVMHead + `    state: Stopped
    maximumCpus: 2
    currentCpus: 1
` + guestMachine + `          storageClassName: local-block
          selector:
            matchLabels:
              disk: %[2]s-%[1]s
          resources:
            requests:
              storage: 48Mi
    - cdrom:
        image: ""
    display:
      spice:
        port: 5910
`

// addGuestDisk adds the volumes the guest VM vm of namespace ns claims: a
// Block one holding a fresh copy of the test guest's disk (booted with the
// guest's params), and a directory for the runner's data (the claim of
// every VM's pod, of the default class). It returns the Block volume's
// name.
func addGuestDisk(t testing.TB, ns, vm string, params ...string) string {
	t.Helper()
	name := ns + "-" + vm
	require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
		Name: name, Size: resource.MustParse("48Mi"),
		Labels: map[string]string{"disk": name}, Content: testguest.Disk(t, params...),
	}))
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
		Name: name + "-data", Size: resource.MustParse("16Mi"),
	}))
	return name
}

// addImageRepository gives namespace ns the claim that VMs with a CD drive
// mount (vmop-image-repository), on a directory volume of the node.
func addImageRepository(t testing.TB, ns string) {
	t.Helper()
	name := ns + "-images"
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
		Name: name, Size: resource.MustParse("1Gi"), Labels: map[string]string{"images": ns},
	}))
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "hello.txt"), []byte("hello\n"), 0o644))
	out, err := exec.Command("genisoimage", "-quiet", "-V", "TEST", "-o", filepath.Join(node.VolumePath(name), "test.iso"), src).CombinedOutput()
	require.NoError(t, err, "genisoimage: %s", out)
	kubectl(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: vmop-image-repository
  namespace: %s
spec:
  accessModes: [ReadWriteOnce]
  selector:
    matchLabels:
      images: %s
  resources:
    requests:
      storage: 1Gi
`, ns, ns), "apply", "-f", "-")
}

// vmStatus reads a VirtualMachine's status.
func vmStatus(t testing.TB, ns, vm string) v1.VirtualMachineStatus {
	t.Helper()
	out := kubectl(t, "", "get", "vm", "-n", ns, vm, "-o", "jsonpath={.status}")
	var s v1.VirtualMachineStatus
	if out != "" {
		require.NoError(t, json.Unmarshal([]byte(out), &s))
	}
	return s
}

// TestOperatorJourney is a new user's way through operator mode: install
// the operator from its image, create a VM, start it, change it live,
// open its display, stop and start it, and delete it. Its guest runs the
// test guest's stand-in agent; what happens shows in kubectl events.
func TestOperatorJourney(t *testing.T) {
	const ns, vm = "journey", "guest"
	installVmop(t)
	createNamespace(t, ns)
	disk := addGuestDisk(t, ns, vm, testguest.Agent, testguest.Screen)
	addImageRepository(t, ns)
	kubectl(t, fmt.Sprintf(guestVM, vm, ns), "apply", "-f", "-")

	start := time.Now()
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	t.Logf("kubectl vm start --wait: %v", time.Since(start).Round(time.Millisecond))
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute))
	waitConsole(t, ns, vm, testguest.ReadyLine, time.Minute)
	requireUnprivileged(t, ns, vm)

	// A node without a usable /dev/kvm (this machine, often) runs the
	// guest emulated: the user sees it.
	accel := "tcg"
	if strings.HasPrefix(testguest.Accel(), "kvm") {
		accel = "kvm"
	}
	eventually.Within(t, 30*time.Second, func() string {
		s := vmStatus(t, ns, vm)
		if s.CPUs == 1 && s.RAM == "512Mi" && s.Node == testnode.Name && s.Accelerator == accel {
			return ""
		}
		return fmt.Sprintf("status: cpus %d, ram %q, node %q, accelerator %q", s.CPUs, s.RAM, s.Node, s.Accelerator)
	})
	status := kubectl(t, "", "vm", "status", "-n", ns, vm)
	for _, want := range []string{"Running", testnode.Name, "Booted", "Accelerator:       " + accel} {
		require.Contains(t, status, want, "kubectl vm status")
	}
	requireEvents(t, ns, "vm/"+vm, "QemuStarted", "qemu runs the guest with the "+accel+" accelerator",
		"Booted", "The guest agent answers")

	t.Run("live changes", func(t *testing.T) {
		pod := podUID(t, ns, vm)
		liveChanges(t, ns, vm, true)
		require.Equal(t, pod, podUID(t, ns, vm), "the pod was replaced")
	})

	t.Run("console", func(t *testing.T) { consoleLogin(t, ns, vm) })
	t.Run("serial console", func(t *testing.T) { serialConsole(t, ns, vm) })
	// The page stays open while the VM stops, and says so.
	browser := headless.Start(t)
	var page *browserPage
	t.Run("browser console", func(t *testing.T) { page = browserConsole(t, browser, ns, vm) })
	if page != nil {
		t.Cleanup(page.end)
	}

	t.Run("stop and start", func(t *testing.T) {
		exit := watchRunnerExit(t, ns, vm)
		grace := terminationGrace(t, ns, vm)
		start := time.Now()
		kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "3m")
		took := time.Since(start)
		t.Logf("kubectl vm stop --wait: %v (grace period %ds)", took.Round(time.Millisecond), grace)
		require.Less(t, took, time.Duration(grace)*time.Second, "the pod was gone only after its grace period")
		select {
		case code := <-exit:
			require.Equal(t, int32(0), code, "the runner's exit code")
		case <-time.After(10 * time.Second):
			t.Fatal("the runner's exit was not seen")
		}
		boots, err := testguest.ReadBoots(node.DiskFile(disk))
		require.NoError(t, err)
		require.Equal(t, 1, boots)
		// Written before the runner exited.
		requireEvents(t, ns, "vm/"+vm, "ShutdownRequested", "Asked the guest agent to shut the guest down",
			"ShutdownCompleted", "after it was asked to")
		if page != nil {
			page.stopped(t, ns, vm)
		}

		kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
		require.Equal(t, testguest.BootPrefix+"2", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute),
			"the second boot sees what the first wrote on the disk")
	})

	t.Run("delete keeps the disks", func(t *testing.T) {
		claims := node.Client.CoreV1().PersistentVolumeClaims(ns)
		before, err := claims.List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		deleteVM(t, ns, vm)
		after, err := claims.List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		require.Equal(t, claimNames(before.Items), claimNames(after.Items))
		boots, err := testguest.ReadBoots(node.DiskFile(disk))
		require.NoError(t, err)
		require.Equal(t, 2, boots, "the disk's data after the VM's deletion")
	})
}

// deleteVM deletes a VirtualMachine and waits until its pod is gone too:
// the node has room for one test VM's CPUs at a time.
func deleteVM(t testing.TB, ns, vm string) {
	t.Helper()
	kubectl(t, "", "delete", "vm", "-n", ns, vm, "--wait", "--timeout", "3m")
	eventually.Within(t, 2*time.Minute, func() string {
		_, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-0", metav1.GetOptions{})
		if err == nil {
			return "the pod " + vm + "-0 is still there"
		}
		return ""
	})
}

func claimNames(claims []corev1.PersistentVolumeClaim) []string {
	var names []string
	for _, c := range claims {
		names = append(names, c.Name+"="+string(c.Status.Phase))
	}
	return names
}

func podUID(t testing.TB, ns, vm string) string {
	t.Helper()
	pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-0", metav1.GetOptions{})
	require.NoError(t, err)
	return string(pod.UID)
}

func terminationGrace(t testing.TB, ns, vm string) int64 {
	t.Helper()
	pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-0", metav1.GetOptions{})
	require.NoError(t, err)
	return *pod.Spec.TerminationGracePeriodSeconds
}

// watchRunnerExit reports the exit code of the runner container of the
// VM's pod when the kubelet reports it terminated.
func watchRunnerExit(t testing.TB, ns, vm string) <-chan int32 {
	t.Helper()
	w, err := node.Client.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + vm + "-0"})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	exit := make(chan int32, 1)
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Error {
				continue
			}
			for _, c := range pod.Status.ContainerStatuses {
				if c.State.Terminated != nil {
					exit <- c.State.Terminated.ExitCode
					return
				}
			}
		}
	}()
	return exit
}

// liveChanges changes CPUs, RAM and the CD of the running VM with the
// plugin and measures how long each takes from the command to qemu, which
// the runner logs once qemu confirmed the change. In operator mode the
// VM's status shows the new values too.
func liveChanges(t *testing.T, ns, vm string, operator bool) {
	for _, c := range []struct {
		name string
		args []string
		msg  string
	}{
		{"cpus", []string{"vm", "set", "-n", ns, vm, "--cpus", "2"}, "CPUs set"},
		{"ram", []string{"vm", "set", "-n", ns, vm, "--ram", "384Mi"}, "Balloon target set"},
		{"cdrom", []string{"vm", "cdrom", "-n", ns, vm, "insert", "test.iso"}, "CD medium changed"},
	} {
		since := time.Now().Truncate(time.Millisecond)
		kubectl(t, "", c.args...)
		var at time.Time
		eventually.Within(t, 3*time.Minute, func() string {
			var ok bool
			if at, ok = runnerLogTime(t, ns, vm, c.msg, since); ok {
				return ""
			}
			return fmt.Sprintf("the runner did not log %q after kubectl %s", c.msg, strings.Join(c.args, " "))
		})
		t.Logf("%s: %v from kubectl to qemu", c.name, at.Sub(since).Round(time.Millisecond))
	}
	waitConsole(t, ns, vm, testguest.CPUsPrefix+"2", time.Minute)
	// GitOps mode has no VirtualMachine: the events regard the StatefulSet.
	obj := "statefulset/" + vm
	if operator {
		obj = "vm/" + vm
	}
	requireEvents(t, ns, obj, "CPUsChanged", "The guest has 2 CPUs (before: 1)",
		"RAMChanged", "The guest's RAM is 384 MiB", "MediumChanged", "test.iso")
	if !operator {
		return
	}
	eventually.Within(t, 30*time.Second, func() string {
		if s := vmStatus(t, ns, vm); s.CPUs != 2 || s.RAM != "384Mi" {
			return fmt.Sprintf("status: cpus %d, ram %q", s.CPUs, s.RAM)
		}
		return ""
	})
}

// consoleLogin runs kubectl vm console --print-vv, which keeps a port
// forward to the VM's pod open through the API server and the kubelet,
// and logs in to the SPICE display through it with the one-time password
// at the first try: the runner set it before the command printed it, in
// both modes, with no wait for the kubelet to refresh a Secret.
func consoleLogin(t *testing.T, ns, vm string) {
	cmd := kubectlCmd(t.Context(), "vm", "console", "-n", ns, vm, "--print-vv", "--expiry", "60s")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	vv := map[string]string{}
	lines := bufio.NewScanner(out)
	for len(vv) < 3 && lines.Scan() {
		if k, v, ok := strings.Cut(lines.Text(), "="); ok && (k == "host" || k == "port" || k == "password") {
			vv[k] = v
		}
	}
	require.Len(t, vv, 3, "the connection file of kubectl vm console; stderr: %s", stderr.String())
	ok, err := spicetest.Login(t.Context(), net.JoinHostPort(vv["host"], vv["port"]), vv["password"])
	require.NoError(t, err, "SPICE through the port forward")
	require.True(t, ok, "the one-time password was refused; stderr: %s", stderr.String())
	require.NotContains(t, stderr.String(), "display Secret", "the password went the slow way, through the Secret")
	ok, err = spicetest.Login(t.Context(), net.JoinHostPort(vv["host"], vv["port"]), "wrong")
	require.NoError(t, err)
	require.False(t, ok, "a wrong password was accepted")
}
