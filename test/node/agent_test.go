package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-node/agent"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/procmem"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// restrictedPod is a pod that passes Pod Security's restricted level and
// runs image as the runner's user.
func restrictedPod(ns, name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](nodeagent.RunnerUID), RunAsGroup: ptr.To[int64](nodeagent.RunnerUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "runner", Image: image, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
}

// TestPodSecurityEnforced: the namespaces of the journeys enforce the
// restricted level, so a VM pod that runs there passes it.
func TestPodSecurityEnforced(t *testing.T) {
	const ns = "psa-check"
	createNamespace(t, ns)
	pod := restrictedPod(ns, "privileged", impostorImage)
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	_, err := node.Client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	require.ErrorContains(t, err, `violates PodSecurity "restricted:latest": privileged`)
	_, err = node.Client.CoreV1().Pods(ns).Create(t.Context(), restrictedPod(ns, "restricted", impostorImage), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "the same pod without privileges")
}

// TestNodeAgentImpostor: pods that carry what the agent looks for
// (vmop's labels, its volume, the runner's user) but are not as vmop
// makes them get nothing from the agent: an answer that says why, no tap
// device, no device of their own, and an event on the pod.
func TestNodeAgentImpostor(t *testing.T) {
	const ns = "impostor"
	createNamespace(t, ns)
	runner := runnerImage(t)

	t.Run("other image", func(t *testing.T) {
		const name = "impostor-0"
		// Without the device resource: the admission policy vm-node-devices
		// keeps it to runner images.
		create(t, impostorPod(ns, name))
		logs := impostorAnswer(t, ns, name)
		require.Contains(t, logs, "answer: the node agent: refused: container runner of pod impostor/impostor-0 runs image "+impostorImage+", not a vmop runner image the node agent trusts")
		require.NotContains(t, logs, "link: vmtap0")
		requireEvents(t, ns, "pod/"+name, agent.EventRefused, "not a vmop runner image")
		// The agent gave the pod's user no device.
		var st unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/root/dev/net/tun", containerPID(t, ns, name)), &st); err == nil {
			require.EqualValues(t, 0, st.Uid, "the owner of the impostor's /dev/net/tun")
		}
	})

	// The runner's image, asking as vmop's uploader does, but not as
	// vmop makes it.
	for name, tc := range map[string]struct {
		change func(*corev1.Pod)
		want   string
	}{
		"other-args": {func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Command, c.Args = nil, []string{"disk", "wait"}
		}, `runs ["disk" "wait"], not a command of vmop's`},
		"init-container": {func(p *corev1.Pod) {
			// It could leave a program for the runner in the emptyDir.
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			init := restrictedPod(ns, "", impostorImage).Spec.Containers[0]
			init.Name, init.Args = "init", []string{"-exit"}
			init.VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
			p.Spec.InitContainers = []corev1.Container{init}
			c := &p.Spec.Containers[0]
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "shared", MountPath: vmpod.DataDir})
		}, "mounts emptyDir shared at " + vmpod.DataDir},
		"share-process-namespace": {func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) },
			"shares its process namespace"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := servedPod(ns, name, runner)
			tc.change(pod)
			create(t, pod)
			requireEvents(t, ns, "pod/"+name, agent.EventRefused, tc.want)
		})
	}

	t.Run("ephemeral-container", func(t *testing.T) {
		const name = "ephemeral"
		create(t, servedPod(ns, name, runner))
		// Served: the agent answered the container.
		eventually.Within(t, time.Minute, func() string {
			pid := containerPID(t, ns, name)
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s/%s", pid, nodeagent.Dir, nodeagent.Prepared)); err != nil {
				return "the agent did not prepare the pod: " + err.Error()
			}
			return ""
		})
		p, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		t.Logf("the runner's image: %s, imageID %s", p.Status.ContainerStatuses[0].Image, p.Status.ContainerStatuses[0].ImageID)
		debug := restrictedPod(ns, "", impostorImage).Spec.Containers[0]
		debug.Name, debug.Args = "debug", []string{"-exit"}
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			TargetContainerName: "runner", EphemeralContainerCommon: corev1.EphemeralContainerCommon(debug)})
		_, err = node.Client.CoreV1().Pods(ns).UpdateEphemeralContainers(t.Context(), name, p, metav1.UpdateOptions{})
		require.NoError(t, err)
		// The container ends (disk wait, on SIGTERM) and asks again as
		// it restarts, now with the debug container on its processes.
		require.NoError(t, unix.Kill(containerPID(t, ns, name), unix.SIGTERM))
		requireEvents(t, ns, "pod/"+name, agent.EventRefused, "ephemeral container debug of pod impostor/ephemeral reaches the processes")
	})

	t.Run("hostile-request", func(t *testing.T) {
		const name = "hostile"
		before := nodeAgentPID(t)
		rss := agentRSS(t, before)
		pod := impostorPod(ns, name)
		pod.Spec.Containers[0].Args = []string{"-size", strconv.Itoa(100 << 20)}
		create(t, pod)
		logs := impostorAnswer(t, ns, name)
		require.Contains(t, logs, "answer: the node agent: refused: container runner of pod impostor/hostile runs image "+impostorImage)
		after := agentRSS(t, before)
		t.Logf("the agent's RSS: %d MiB before the request, %d MiB after", rss>>20, after>>20)
		require.Less(t, after-rss, int64(16<<20), "the agent's RSS grew")
		require.Equal(t, before, nodeAgentPID(t), "the agent was restarted")
		n, err := node.Client.CoreV1().Nodes().Get(t.Context(), testnode.Name, metav1.GetOptions{})
		require.NoError(t, err)
		q := n.Status.Allocatable[nodeagent.Resource]
		require.False(t, q.IsZero(), "the node offers no %s: the device plugin is gone", nodeagent.Resource)
	})
}

// runnerImage is the runner image that vmop renders, which the agent
// trusts.
func runnerImage(t *testing.T) string {
	file := filepath.Join(t.TempDir(), "vm.yaml")
	require.NoError(t, os.WriteFile(file, []byte("apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: x, namespace: x}\n"), 0o644))
	m := regexp.MustCompile(`image: (\S+/` + version.RunnerImage + `:\S+)`).FindStringSubmatch(kubectl(t, "", "vm", "render", "-f", file))
	require.NotNil(t, m, "no runner image in kubectl vm render's output")
	return m[1]
}

// impostorPod is a pod with vmop's labels and the agent's volume that
// runs test/node/impostor.
func impostorPod(ns, name string) *corev1.Pod {
	pod := restrictedPod(ns, name, impostorImage)
	pod.Labels = render.Labels("impostor")
	pod.Spec.Volumes = []corev1.Volume{render.NodeAgentVolume()}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: nodeagent.Volume, MountPath: nodeagent.Dir}}
	return pod
}

// servedPod is a pod as the agent serves it: vmop's labels, the runner
// image as the uploader pod of kubectl vm disk upload runs it.
func servedPod(ns, name, image string) *corev1.Pod {
	pod := restrictedPod(ns, name, image)
	pod.Labels = render.Labels(name)
	pod.Spec.Volumes = []corev1.Volume{render.NodeAgentVolume()}
	c := &pod.Spec.Containers[0]
	c.Command = []string{"vm-runner", "disk", "wait"}
	render.AskNodeAgent(c)
	return pod
}

func create(t *testing.T, pod *corev1.Pod) {
	_, err := node.Client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = node.Client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
}

// impostorAnswer waits for the agent's answer in the impostor's log.
func impostorAnswer(t *testing.T, ns, name string) string {
	var logs string
	eventually.Within(t, 2*time.Minute, func() string {
		logs, _, _ = kubectlResult(t.Context(), "", "logs", "-n", ns, name)
		if strings.Contains(logs, "answer:") && strings.Contains(logs, "link:") {
			return ""
		}
		return "the impostor has no answer yet: " + logs
	})
	t.Logf("the impostor's log:\n%s", logs)
	return logs
}

// containerPID is the host pid of the first container of a pod.
func containerPID(t *testing.T, ns, name string) int {
	var pid int
	eventually.Within(t, time.Minute, func() string {
		p, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			return "the pod's container does not run yet"
		}
		pid, err = node.Containerd.PID(t.Context(), strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://"))
		if err != nil {
			return err.Error()
		}
		return ""
	})
	return pid
}

// agentRSS is the resident memory of process pid (the agent), from
// /proc.
func agentRSS(t *testing.T, pid int) int64 {
	rss, err := procmem.RSS(pid)
	require.NoError(t, err)
	return rss
}

// requireUnprivileged checks that qemu in the VM's pod runs as the
// runner's user, not root, and holds no capability.
func requireUnprivileged(t testing.TB, ns, vm string) {
	t.Helper()
	runner, err := runnerPID(t.Context(), ns, vm)
	require.NoError(t, err)
	qemu := qemuPID(t, runner)
	for _, pid := range []int{runner, qemu} {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		require.NoError(t, err)
		fields := map[string]string{}
		for _, l := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(l, ":")
			fields[k] = strings.TrimSpace(v)
		}
		t.Logf("%s (pid %d): Uid %s, CapEff %s, NoNewPrivs %s", fields["Name"], pid, fields["Uid"], fields["CapEff"], fields["NoNewPrivs"])
		want := strconv.Itoa(nodeagent.RunnerUID)
		require.Equal(t, []string{want, want, want, want}, strings.Fields(fields["Uid"]), "%s's uids", fields["Name"])
		require.Equal(t, "0000000000000000", fields["CapEff"], "%s's effective capabilities", fields["Name"])
		require.Equal(t, "1", fields["NoNewPrivs"], "%s may gain no privilege", fields["Name"])
	}
}

// TestNodeAgentMissing is a first cluster without the node agent: a VM
// rendered for GitOps waits, and kubectl vm status says to install the
// agent; once it is installed, the VM starts without anything else done.
func TestNodeAgentMissing(t *testing.T) {
	const ns, vm = "no-agent", "guest"
	kubectl(t, "", "delete", "daemonset", "-n", "vmop-system", "vm-node", "--wait")
	// Whatever happens, the later journeys need the agent.
	defer func() { require.NoError(t, installNodeAgent()) }()
	eventually.Within(t, time.Minute, func() string {
		n, err := node.Client.CoreV1().Nodes().Get(t.Context(), testnode.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if q := n.Status.Allocatable[nodeagent.Resource]; !q.IsZero() {
			return fmt.Sprintf("the node still offers %s %s", q.String(), nodeagent.Resource)
		}
		return ""
	})

	createNamespace(t, ns)
	grantRunner(t, ns)
	addGuestDisk(t, ns, vm)
	addImageRepository(t, ns)
	file := filepath.Join(t.TempDir(), "vm.yaml")
	require.NoError(t, os.WriteFile(file, []byte(strings.Replace(fmt.Sprintf(guestVM, vm, ns), "state: Stopped", "state: Running", 1)), 0o644))
	rendered := kubectl(t, "", "vm", "render", "--service-account", install.RunnerServiceAccount, "-f", file)
	kubectl(t, rendered, "apply", "-f", "-")
	// Its pod would hold the node's CPUs.
	defer kubectl(t, rendered, "delete", "--wait", "-f", "-")

	var status string
	eventually.Within(t, time.Minute, func() string {
		status = kubectl(t, "", "vm", "status", "-n", ns, vm)
		if strings.Contains(status, v1.ReasonNodeAgentMissing) {
			return ""
		}
		return "kubectl vm status does not say the agent is missing:\n" + status
	})
	t.Logf("kubectl vm status without the agent:\n%s", status)
	require.Contains(t, status, "kubectl vm install")

	require.NoError(t, installNodeAgent())
	waitConsole(t, ns, vm, testguest.ReadyLine, 3*time.Minute)
}

// oldRendering is rendered as vmop rendered it before VM pods ran
// unprivileged: a privileged root runner that asks no agent and requests
// no device.
func oldRendering(t *testing.T, rendered string) string {
	docs := strings.Split(rendered, "\n---\n")
	for i, doc := range docs {
		if !strings.Contains(doc, "kind: StatefulSet") {
			continue
		}
		var sts appsv1.StatefulSet
		require.NoError(t, yaml.Unmarshal([]byte(doc), &sts))
		pod := &sts.Spec.Template.Spec
		pod.SecurityContext = nil
		c := &pod.Containers[0]
		c.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		c.Env = nil
		delete(c.Resources.Limits, nodeagent.Resource)
		b, err := yaml.Marshal(&sts)
		require.NoError(t, err)
		docs[i] = string(b)
	}
	return strings.Join(docs, "\n---\n")
}

// TestUpgradeFromPrivileged: a VM whose pod an older vmop made (privileged,
// root) keeps running when the new rendering is applied, and its next
// start gets the restricted pod, which takes over the data the root runner
// wrote (its TPM's state among them).
func TestUpgradeFromPrivileged(t *testing.T) {
	const ns, vm = "upgrade", "guest"
	// The old pod is privileged.
	createNamespaceAt(t, ns, "privileged")
	grantRunner(t, ns)
	addGuestDisk(t, ns, vm)
	addImageRepository(t, ns)
	file := filepath.Join(t.TempDir(), "vm.yaml")
	m := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "state: Stopped", "state: Running", 1)
	m = strings.Replace(m, "    firmware: bios\n", "    firmware: bios\n    useTpm: true\n", 1)
	require.NoError(t, os.WriteFile(file, []byte(m), 0o644))
	running := kubectl(t, "", "vm", "render", "--service-account", install.RunnerServiceAccount, "-f", file)
	kubectl(t, oldRendering(t, running), "apply", "-f", "-")
	defer kubectl(t, running, "delete", "--wait", "-f", "-")
	waitConsole(t, ns, vm, testguest.ReadyLine, 3*time.Minute)
	old := podUID(t, ns, vm)
	pid, err := runnerPID(t.Context(), ns, vm)
	require.NoError(t, err)
	fi, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	require.NoError(t, err)
	require.EqualValues(t, 0, fi.Sys().(*syscall.Stat_t).Uid, "the old runner's uid")

	// As a GitOps tool applies the new rendering.
	kubectl(t, running, "apply", "-f", "-")
	// The StatefulSet's OnDelete strategy leaves the running pod alone.
	time.Sleep(5 * time.Second)
	require.Equal(t, old, podUID(t, ns, vm), "applying the new rendering replaced the running VM's pod")
	waitConsole(t, ns, vm, testguest.ReadyLine, time.Second)

	// Its next start: the restricted pod, on the data the root runner left.
	kubectl(t, "", "delete", "pod", "-n", ns, vm+"-0", "--wait")
	eventually.Within(t, 3*time.Minute, func() string {
		pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-0", metav1.GetOptions{})
		if err != nil || string(pod.UID) == old {
			return fmt.Sprintf("the VM's pod is not replaced yet (%v)", err)
		}
		log, err := consoleLog(t.Context(), ns, vm)
		if err != nil {
			return err.Error()
		}
		if !strings.Contains(log, testguest.BootPrefix+"2") {
			return "the guest did not boot a second time:\n" + log
		}
		return ""
	})
	requireUnprivileged(t, ns, vm)
}
