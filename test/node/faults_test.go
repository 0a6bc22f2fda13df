package node

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
)

// TestFaults: what goes wrong on a real node ends in a status a user
// understands, and a running VM survives what it should.
func TestFaults(t *testing.T) {
	const ns = "faults"
	installVmop(t)
	createNamespace(t, ns)
	addImageRepository(t, ns)

	// failedWith waits until kubectl vm status shows the Failed condition
	// with reason, and returns what it shows.
	// A crash-looping runner is Running for a moment between back-offs,
	// so the condition and kubectl vm status are read in one go.
	failedWith := func(t *testing.T, vm, reason string) string {
		t.Helper()
		shown := regexp.MustCompile(`Failed\s+True\s+` + reason)
		var out string
		eventually.Within(t, 2*time.Minute, func() string {
			for _, c := range vmStatus(t, ns, vm).Conditions {
				if c.Type == v1.ConditionFailed && c.Status == metav1.ConditionTrue && c.Reason == reason {
					if out = kubectl(t, "", "vm", "status", "-n", ns, vm); shown.MatchString(out) {
						return ""
					}
					return "kubectl vm status does not show it (yet):\n" + out
				}
			}
			return fmt.Sprintf("no Failed condition %s: %+v", reason, vmStatus(t, ns, vm).Conditions)
		})
		return out
	}

	t.Run("image that cannot be pulled", func(t *testing.T) {
		const vm = "badimage"
		addGuestDisk(t, ns, vm)
		// A registry on loopback that refuses: nothing leaves the machine.
		manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "spec:\n", "spec:\n  image:\n    source: "+unpullableRepository+":none\n", 1)
		kubectl(t, manifest, "apply", "-f", "-")
		// --wait shows why it does not get on, and gives up at its timeout.
		out, _, err := kubectlResult(t.Context(), "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "20s")
		require.Error(t, err)
		require.Contains(t, out, vm+": Starting, "+v1.ReasonImagePull+": The node cannot pull the runner image 127.0.0.1:1/vmop/vm-runner:none")
		out = failedWith(t, vm, v1.ReasonImagePull)
		require.Contains(t, out, "127.0.0.1:1/vmop/vm-runner:none")
		deleteVM(t, ns, vm)
	})

	t.Run("claim that never binds", func(t *testing.T) {
		const vm = "nodisk"
		// No volume carries the label the disk's claim selects.
		kubectl(t, fmt.Sprintf(guestVM, vm, ns), "apply", "-f", "-")
		kubectl(t, "", "vm", "start", "-n", ns, vm)
		out := failedWith(t, vm, v1.ReasonUnschedulable)
		require.Contains(t, out, "persistent volumes")
		deleteVM(t, ns, vm)
	})

	t.Run("qemu refuses to start", func(t *testing.T) {
		const vm = "badcpu"
		addGuestDisk(t, ns, vm)
		// A CPU model this qemu does not know: only qemu can tell.
		manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "    firmware: bios\n", "    firmware: bios\n    cpuModel: no-such-cpu\n", 1)
		kubectl(t, manifest, "apply", "-f", "-")
		// Also when the test fails (a deferred call still has t's context):
		// its pod would hold the node's CPUs.
		defer deleteVM(t, ns, vm)
		kubectl(t, "", "vm", "start", "-n", ns, vm)
		out := failedWith(t, vm, v1.ReasonQemuFailed)
		require.Contains(t, out, "qemu-system-x86_64: unable to find CPU model 'no-such-cpu'")
		requireEvents(t, ns, "vm/"+vm, "StartFailed", "unable to find CPU model 'no-such-cpu'")
	})

	t.Run("tap network without its bridge", func(t *testing.T) {
		const vm = "nobridge"
		addGuestDisk(t, ns, vm)
		manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "    disks:\n", "    networks:\n    - tap: {bridge: nosuchbr0}\n    disks:\n", 1)
		kubectl(t, manifest, "apply", "-f", "-")
		defer deleteVM(t, ns, vm)
		kubectl(t, "", "vm", "start", "-n", ns, vm)
		// A tap NIC needs a privileged pod, which the namespace refuses.
		out := failedWith(t, vm, v1.ReasonPodCreateFailed)
		require.Contains(t, out, `violates PodSecurity "restricted:latest"`)
		kubectl(t, "", "label", "namespace", ns, "--overwrite", "pod-security.kubernetes.io/enforce=privileged")
		defer kubectl(t, "", "label", "namespace", ns, "--overwrite", "pod-security.kubernetes.io/enforce=restricted")
		out = failedWith(t, vm, v1.ReasonNetworkFailed)
		require.Contains(t, out, `bridge "nosuchbr0" does not exist on node`)
		requireEvents(t, ns, "vm/"+vm, "StartFailed", `network 0 (tap): bridge "nosuchbr0" does not exist on node`)
	})

	t.Run("full disk", func(t *testing.T) { fullDisk(t, ns) })
	t.Run("full runner data", func(t *testing.T) { runnerDataFull(t, ns) })

	// The survivor's CD image is not in the image repository: the VM boots
	// its disk without it, and says so. Its guest writes records through
	// the faults below: none it was told are synced may go missing.
	const vm = "survivor"
	addGuestDisk(t, ns, vm, recordWriter()...)
	manifest, records := withRecordsDisk(t, ns, vm, strings.Replace(fmt.Sprintf(guestVM, vm, ns), `image: ""`, "image: gone.iso", 1))
	kubectl(t, manifest, "apply", "-f", "-")

	t.Run("operator restarted mid-start", func(t *testing.T) {
		kubectl(t, "", "vm", "start", "-n", ns, vm)
		kubectl(t, "", "delete", "pod", "-n", "vmop-system", "-l", "app.kubernetes.io/name=vm-operator", "--wait=false")
		kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
		require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute))
		waitConsole(t, ns, vm, testguest.ReadyLine, time.Minute)
	})

	t.Run("CD image missing", func(t *testing.T) {
		eventually.Within(t, time.Minute, func() string {
			out := kubectl(t, "", "vm", "status", "-n", ns, vm)
			if strings.Contains(out, "MediumUnavailable") && strings.Contains(out, "vmop-image-repository/gone.iso") {
				return ""
			}
			return "kubectl vm status:\n" + out
		})
		requireEvents(t, ns, "vm/"+vm, "MediumUnavailable", "spec.vm.disks[2].cdrom.image", "vmop-image-repository/gone.iso")
	})

	// setCPUs is a live change that reaches the guest. Under TCG qemu
	// plugs no more than maximumCpus (2) CPUs in a run: 1, 2, 1 here.
	setCPUs := func(cpus int) func(*testing.T) {
		return func(t *testing.T) {
			kubectl(t, "", "vm", "set", "-n", ns, vm, "--cpus", fmt.Sprint(cpus))
			waitGuestCPUs(t, ns, vm, cpus, time.Minute)
		}
	}
	// requireKeptRunning: after a fault of the node's, the VM runs on as
	// it did: the same runner, no new boot, its guest writing records
	// and losing none, and a live change still reaches it.
	requireKeptRunning := func(t *testing.T, fault string, runner, acked int, change func(*testing.T)) {
		t.Helper()
		pid, err := runnerPID(t.Context(), ns, vm)
		require.NoError(t, err)
		require.Equal(t, runner, pid, "the runner after the %s; its container's states: %s", fault,
			kubectl(t, "", "get", "pod", "-n", ns, vm+"-0", "-o", "jsonpath={.status.containerStatuses}"))
		require.NoError(t, syscall.Kill(pid, 0), "the runner after the %s; its container's states: %s", fault,
			kubectl(t, "", "get", "pod", "-n", ns, vm+"-0", "-o", "jsonpath={.status.containerStatuses}"))
		log, err := consoleLog(t.Context(), ns, vm)
		require.NoError(t, err)
		require.Equal(t, 1, strings.Count(log, testguest.BootPrefix), "boots on the console:\n%s", log)
		change(t)
		now := requireRecordsKept(t, ns, vm, records, acked)
		t.Logf("%s: the guest wrote records %d to %d meanwhile, 0 lost", fault, acked+1, now)
		require.Contains(t, kubectl(t, "", "vm", "status", "-n", ns, vm), "Running")
	}
	// requireBootedAgain: after a fault that ends the guest, it boots
	// again from the same disks, keeping every record it acknowledged
	// before (acked).
	requireBootedAgain := func(t *testing.T, fault string, boot, acked int, faulted time.Time) {
		t.Helper()
		waitConsole(t, ns, vm, testguest.BootPrefix+fmt.Sprint(boot), 3*time.Minute)
		t.Logf("%s: the guest booted again %.0f s after it", fault, time.Since(faulted).Seconds())
		next := requireResumed(t, ns, vm, acked)
		t.Logf("%s: %d records acknowledged before it, the guest went on at record %d: 0 lost", fault, acked, next)
	}

	t.Run("kubelet restarted", func(t *testing.T) {
		runner, err := runnerPID(t.Context(), ns, vm)
		require.NoError(t, err)
		acked := ackedRecords(t, ns, vm)
		require.NoError(t, node.RestartKubelet(t.Context()))
		requireKeptRunning(t, "kubelet restart", runner, acked, setCPUs(2))
	})

	// The node agent replaced, as an upgrade's rollout does: the running
	// VM keeps its pod's devices and network, and live changes still
	// reach it.
	t.Run("node agent rolled out", func(t *testing.T) {
		runner, err := runnerPID(t.Context(), ns, vm)
		require.NoError(t, err)
		acked := ackedRecords(t, ns, vm)
		start := time.Now()
		kubectl(t, "", "rollout", "restart", "-n", "vmop-system", "daemonset/vm-node")
		kubectl(t, "", "rollout", "status", "-n", "vmop-system", "daemonset/vm-node", "--timeout", "2m")
		t.Logf("node agent rolled out in %.1f s", time.Since(start).Seconds())
		requireKeptRunning(t, "node agent rollout", runner, acked, setCPUs(1))
	})

	// containerd restarted alone (an upgrade, systemctl restart): the
	// shims keep the pods' containers running meanwhile.
	t.Run("containerd restarted", func(t *testing.T) {
		runner, err := runnerPID(t.Context(), ns, vm)
		require.NoError(t, err)
		acked := ackedRecords(t, ns, vm)
		require.NoError(t, node.RestartContainerd())
		requireKeptRunning(t, "containerd restart", runner, acked, func(t *testing.T) {
			kubectl(t, "", "vm", "cdrom", "-n", ns, vm, "insert", "test.iso")
			requireEvents(t, ns, "vm/"+vm, "MediumChanged", "test.iso")
		})
	})

	// Under TCG, qemu aborted at a plug beyond maximumCpus vCPU threads
	// in one run (2 here: 1 at the start, 1 plugged and unplugged since);
	// the runner plugs no more and says when the guest gets the CPU.
	t.Run("CPU plugged again", func(t *testing.T) {
		runner, err := runnerPID(t.Context(), ns, vm)
		require.NoError(t, err)
		kubectl(t, "", "vm", "set", "-n", ns, vm, "--cpus", "2")
		if events := kubectl(t, "", "events", "-n", ns, "--for", "vm/"+vm); !strings.Contains(events, "with the tcg accelerator") {
			waitGuestCPUs(t, ns, vm, 2, time.Minute) // KVM has no such limit
			return
		}
		requireEvents(t, ns, "vm/"+vm, "CPUsDeferred", "The guest keeps 1 CPUs until its next start (kubectl vm restart), then gets 2")
		pid, err := runnerPID(t.Context(), ns, vm)
		require.NoError(t, err)
		require.Equal(t, runner, pid)
		require.Equal(t, []int{1, 2, 1}, guestCPULines(t, ns, vm), "the guest's CPU counts")
	})

	t.Run("runner killed", func(t *testing.T) {
		pod := podUID(t, ns, vm)
		pid, err := runnerPID(t.Context(), ns, vm)
		require.NoError(t, err)
		acked := ackedRecords(t, ns, vm)
		killed := time.Now()
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		// The kubelet restarts the container; the guest boots again from
		// the same disk, in the same pod.
		requireBootedAgain(t, "runner killed", 2, acked, killed)
		require.Equal(t, pod, podUID(t, ns, vm))
		requireStatusSays(t, ns, vm, "Running", "runner restarted 1 time (last exit code 137")
	})
	t.Run("qemu hung", func(t *testing.T) {
		runner, err := runnerPID(t.Context(), ns, vm)
		require.NoError(t, err)
		stopped := time.Now()
		require.NoError(t, syscall.Kill(qemuPID(t, runner), syscall.SIGSTOP))
		acked := ackedRecords(t, ns, vm)
		// The runner kills it and exits; the kubelet starts the VM again.
		requireBootedAgain(t, "qemu hung", 3, acked, stopped)
		requireEvents(t, ns, "vm/"+vm, "QemuHung", "qemu did not answer its monitor for 30s")
		requireStatusSays(t, ns, vm, "Running", "runner restarted 2 times")
	})
	// A runner that stops answering (SIGSTOP; a loop stuck for minutes
	// alike) fails its liveness probe: the kubelet kills it and starts
	// the VM again, and the pod's Unhealthy event, in kubectl vm status,
	// says why.
	t.Run("runner stopped", func(t *testing.T) {
		runner, err := runnerPID(t.Context(), ns, vm)
		require.NoError(t, err)
		stopped := time.Now()
		require.NoError(t, syscall.Kill(runner, syscall.SIGSTOP))
		// What the stopped runner has read from the console; the guest,
		// whose qemu runs on, may write more.
		acked := ackedRecords(t, ns, vm)
		requireBootedAgain(t, "runner stopped", 4, acked, stopped)
		requireStatusSays(t, ns, vm, "Running", "runner restarted 3 times", "Liveness probe failed: not alive: no runner answers")
		requireRecordsKept(t, ns, vm, records, 0)
	})
	deleteVM(t, ns, vm)
}

// requireStatusSays waits up to a minute for kubectl vm status of vm to
// say each of says.
func requireStatusSays(t *testing.T, ns, vm string, says ...string) {
	t.Helper()
	eventually.Within(t, time.Minute, func() string {
		out := kubectl(t, "", "vm", "status", "-n", ns, vm)
		for _, s := range says {
			if !strings.Contains(out, s) {
				return "kubectl vm status:\n" + out
			}
		}
		return ""
	})
}
