package agent

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
)

const runnerRepo = "ghcr.io/vmop/vm-runner"

func newAgent(t *testing.T) *Agent {
	a, err := New(Options{NodeName: "n", KubeletRootDir: t.TempDir(), RunnerRepositories: []string{runnerRepo}, Proc: t.TempDir()})
	require.NoError(t, err)
	return a
}

// vmManifest is a VM whose pod has every container that asks the agent
// (the runner, the import) and those that do not (the containerDisk's).
const vmManifest = `
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: vm, namespace: ns}
spec:
  vm:
    state: Running
    networks: [{pod: {}}]
    disks:
    - volumeClaimTemplate:
        metadata: {name: system}
        spec: {resources: {requests: {storage: 1Gi}}}
      source: {url: "https://example.org/disk.qcow2"}
    - volumeClaimTemplate:
        metadata: {name: files}
        spec: {volumeMode: Filesystem, resources: {requests: {storage: 1Gi}}}
      source: {containerDisk: "example.org/disks/debian:13"}
    - cdrom: {image: "debian.iso"}
`

// vmPod is the pod of vmManifest as render makes it, on the agent's
// node, as the kubelet runs it (the runner started).
func vmPod() *corev1.Pod {
	var vm v1.VirtualMachine
	if err := yaml.UnmarshalStrict([]byte(vmManifest), &vm); err != nil {
		panic(err)
	}
	objs, err := render.Render(&vm, render.Options{ImageRegistry: path.Dir(runnerRepo)})
	if err != nil {
		panic(err)
	}
	t := objs.StatefulSet.Spec.Template
	pod := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	pod.Namespace, pod.Name, pod.UID = "ns", "vm-0", "0b0e8f4e-1c9a-4b53-9d3a-6f0c2f1d2e3a"
	for _, c := range pod.Spec.InitContainers {
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: imageID(c.Image),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}})
	}
	c := pod.Spec.Containers[0]
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, ImageID: imageID(c.Image),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	return pod
}

// asRead is pod as the agent reads it from the API server: its JSON,
// decoded into the agent's Pod. So the tests check that the agent reads
// every field it trusts by.
func asRead(t *testing.T, pod *corev1.Pod) *Pod {
	t.Helper()
	b, err := json.Marshal(pod)
	require.NoError(t, err)
	var p Pod
	require.NoError(t, json.Unmarshal(b, &p))
	return &p
}

// runnerDigest is the digest of the runner image the tests run.
var runnerDigest = "sha256:" + strings.Repeat("a", 64)

// imageID is a container status's imageID for image, as containerd
// reports it: the repository and the digest.
func imageID(image string) string {
	repo, err := repository(image)
	if err != nil {
		panic(err)
	}
	return repo + "@" + runnerDigest
}

func TestNewNeedsRepository(t *testing.T) {
	_, err := New(Options{})
	require.EqualError(t, err, "no runner repository to trust")
	_, err = New(Options{RunnerRepositories: []string{"UPPER/case"}})
	require.ErrorContains(t, err, `runner repository "UPPER/case"`)
}

// container is the container of pod called name.
func container(pod *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	panic("no container " + name)
}

// sidecar is a container of another image that mounts volume at dir.
func sidecar(volume, dir string) corev1.Container {
	return corev1.Container{Name: "evil", Image: "example.org/evil:1", VolumeMounts: []corev1.VolumeMount{{Name: volume, MountPath: dir}}}
}

// TestTrustPod: the agent trusts the pod render makes, and refuses an
// impostor of each kind.
func TestTrustPod(t *testing.T) {
	a := newAgent(t)
	require.NoError(t, a.trustPod(asRead(t, vmPod())))
	digest := vmPod()
	digest.Spec.Containers[0].Image = runnerRepo + "@" + runnerDigest
	require.NoError(t, a.trustPod(asRead(t, digest)), "a digest names the same repository")
	emptyDir := corev1.Volume{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}

	for name, tc := range map[string]struct {
		change func(*corev1.Pod)
		want   string
	}{
		"labels only": {func(p *corev1.Pod) { container(p, "runner").Image = "example.org/evil:1" },
			"container runner of pod ns/vm-0 runs image example.org/evil:1, not a vmop runner image the node agent trusts (ghcr.io/vmop/vm-runner)"},
		"similar repository": {func(p *corev1.Pod) { container(p, "import").Image = runnerRepo + "-evil:v1" },
			"container import of pod ns/vm-0 runs image ghcr.io/vmop/vm-runner-evil:v1"},
		"other command": {func(p *corev1.Pod) { container(p, "runner").Command = []string{"/var/local/vm-data/evil"} },
			`container runner of pod ns/vm-0 runs ["/var/local/vm-data/evil"], not a command of vmop's`},
		"other args": {func(p *corev1.Pod) { container(p, "runner").Args = []string{"--qemu=/x"} },
			`container runner of pod ns/vm-0 runs ["--qemu=/x"], not a command of vmop's`},
		"import's args with more": {func(p *corev1.Pod) { container(p, "import").Args = []string{"import", "--qemu-img=/x"} },
			`container import of pod ns/vm-0 runs ["import" "--qemu-img=/x"]`},
		"environment": {func(p *corev1.Pod) {
			c := container(p, "runner")
			c.Env = append(c.Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/var/local/vm-data/evil.so"})
		}, "container runner of pod ns/vm-0 has an environment other than vmop's"},
		"environment replaced": {func(p *corev1.Pod) { container(p, "runner").Env = []corev1.EnvVar{{Name: "PATH", Value: "/x"}} },
			"container runner of pod ns/vm-0 sets PATH, which vmop does not"},
		"lifecycle hook": {func(p *corev1.Pod) {
			container(p, "runner").Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/x"}}}}
		}, "container runner of pod ns/vm-0 has a working directory or lifecycle hooks"},
		"probe": {func(p *corev1.Pod) { container(p, "runner").ReadinessProbe.Exec.Command = []string{"/x"} },
			`container runner of pod ns/vm-0 has a probe that runs ["/x"]`},
		"liveness probe": {func(p *corev1.Pod) {
			container(p, "runner").LivenessProbe.Exec.Command = []string{"vm-runner", "probe", "--live", "; sh"}
		},
			`container runner of pod ns/vm-0 has a probe that runs ["vm-runner" "probe" "--live" "; sh"]`},
		"mount over the programs": {func(p *corev1.Pod) {
			c := container(p, "runner")
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "runner-data", MountPath: "/usr/bin"})
		}, "container runner of pod ns/vm-0 mounts volume runner-data at /usr/bin, where vmop mounts none"},
		"mount over the templates": {func(p *corev1.Pod) {
			c := container(p, "runner")
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "runner-data", MountPath: "/opt/vmrunner/templates"})
		}, "mounts volume runner-data at /opt/vmrunner/templates"},
		"device elsewhere": {func(p *corev1.Pod) {
			container(p, "runner").VolumeDevices[0].DevicePath = "/usr/bin/qemu-system-x86_64"
		},
			"container runner of pod ns/vm-0 has device /usr/bin/qemu-system-x86_64 outside /dev"},
		"init container shares an emptyDir with the runner": {func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, emptyDir)
			p.Spec.InitContainers = append(p.Spec.InitContainers, sidecar("shared", "/x"))
			c := container(p, "runner")
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "shared", MountPath: "/var/local/vm-data"})
		}, "container runner of pod ns/vm-0 mounts emptyDir shared at /var/local/vm-data"},
		"the runner mounts the import's scratch": {func(p *corev1.Pod) {
			c := container(p, "runner")
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: render.VolumeImportScratch, MountPath: "/var/local/vmop-import"})
		}, "container runner of pod ns/vm-0 mounts emptyDir import-scratch at /var/local/vmop-import"},
		"init container mounts the socket": {func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, sidecar(nodeagent.Volume, "/x"))
		}, "container evil of pod ns/vm-0 runs image example.org/evil:1"},
		"container mounts the socket": {func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, sidecar(nodeagent.Volume, "/x"))
		}, "container evil of pod ns/vm-0 runs image example.org/evil:1"},
		"shared process namespace": {func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) },
			"pod ns/vm-0 shares its process namespace"},
		"ephemeral container targets the runner": {func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{TargetContainerName: "runner",
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
		}, "ephemeral container debug of pod ns/vm-0 reaches the processes or the socket of a container the agent serves"},
		"ephemeral container mounts the socket": {func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: nodeagent.Volume, MountPath: "/x"}}}}}
		}, "ephemeral container debug of pod ns/vm-0 reaches"},
		"image changed while running": {func(p *corev1.Pod) {
			s := &p.Status.ContainerStatuses[0]
			s.Image, s.ImageID = "example.org/evil:1", "example.org/evil@"+runnerDigest
		}, "container runner of pod ns/vm-0 still runs image example.org/evil:1"},
		"image ID of another repository": {func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].ImageID = "example.org/evil@" + runnerDigest
		}, "container runner of pod ns/vm-0 runs image example.org/evil@sha256:aaaa"},
		"digest mismatch": {func(p *corev1.Pod) {
			container(p, "runner").Image = runnerRepo + "@sha256:" + strings.Repeat("b", 64)
		}, "container runner of pod ns/vm-0 runs image ghcr.io/vmop/vm-runner@sha256:aaaa"},
		"not vmop's":   {func(p *corev1.Pod) { p.Labels = nil }, "pod ns/vm-0 is not labelled app.kubernetes.io/managed-by=vm-operator"},
		"host network": {func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "shares a namespace of the node"},
		"privileged": {func(p *corev1.Pod) {
			container(p, "runner").SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, "container runner of pod ns/vm-0 is privileged"},
		"capabilities": {func(p *corev1.Pod) {
			container(p, "runner").SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_PTRACE"}
		}, "container runner of pod ns/vm-0 is privileged or adds capabilities"},
		"no socket": {func(p *corev1.Pod) {
			for _, n := range []string{"runner", "import"} {
				c := container(p, n)
				c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == nodeagent.Volume })
			}
		}, "no container of pod ns/vm-0 mounts volume vm-node"},
		"host path socket": {func(p *corev1.Pod) {
			for i, v := range p.Spec.Volumes {
				if v.Name == nodeagent.Volume {
					p.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
				}
			}
		}, "pod ns/vm-0 has a host path (volume vm-node)"},
		"socket not an emptyDir": {func(p *corev1.Pod) {
			for i, v := range p.Spec.Volumes {
				if v.Name == nodeagent.Volume {
					p.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "x"}}
				}
			}
		}, "volume vm-node of pod ns/vm-0 is not an emptyDir"},
	} {
		t.Run(name, func(t *testing.T) {
			p := vmPod()
			tc.change(p)
			err := a.trustPod(asRead(t, p))
			require.ErrorIs(t, err, errRefused)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// fakeProc makes a process pid under a.o.Proc with a root directory and
// a network namespace (a stand-in file) of its own, and returns the
// root.
func fakeProc(t *testing.T, a *Agent, pid int) string {
	root := filepath.Join(a.procPath(pid), "root")
	require.NoError(t, os.MkdirAll(filepath.Join(root, nodeagent.Dir), 0o755))
	require.NoError(t, os.MkdirAll(a.procPath(pid, "ns"), 0o755))
	require.NoError(t, os.WriteFile(a.procPath(pid, "ns", "net"), nil, 0o444))
	return root
}

// socketIn makes the pod's socket (a stand-in file) in a fake process's
// root and returns its identity.
func socketIn(t *testing.T, root string) fileID {
	p := filepath.Join(root, nodeagent.Dir, nodeagent.Socket)
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(p, &st))
	return statID(&st)
}

// fdID is the identity of the file that descriptor fd is open on.
func fdID(t *testing.T, fd int) fileID {
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &st))
	return statID(&st)
}

func pathID(t *testing.T, path string) fileID {
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return statID(&st)
}

func TestTrustPeer(t *testing.T) {
	a := newAgent(t)
	pod := vmPod()
	fakeProc(t, a, 1) // the node's first process, in its namespaces
	sock := socketIn(t, fakeProc(t, a, 100))
	other := socketIn(t, fakeProc(t, a, 200))
	require.NotEqual(t, sock, other)
	link := fakeProc(t, a, 201)
	require.NoError(t, os.Symlink(filepath.Join(a.procPath(100), "root", nodeagent.Dir, nodeagent.Socket), filepath.Join(link, nodeagent.Dir, nodeagent.Socket)))
	fakeProc(t, a, 400)
	// In the pod's container, but in the node's network namespace.
	fakeProc(t, a, 300)
	require.NoError(t, os.RemoveAll(a.procPath(300, "root")))
	// (Process 100's, which its dir has once it has ended, below.)
	require.NoError(t, os.Symlink(filepath.Join(a.procPath(100)+".gone", "root"), a.procPath(300, "root")))
	require.NoError(t, os.Remove(a.procPath(300, "ns", "net")))
	require.NoError(t, os.Link(a.procPath(1, "ns", "net"), a.procPath(300, "ns", "net")))

	netns := pathID(t, a.procPath(100, "ns", "net"))
	p, err := a.trustPeer(asRead(t, pod), 100, nodeagent.RunnerUID, sock)
	require.NoError(t, err)
	// Process 100 ends, and another takes its pid: what the agent holds
	// is still the first one's.
	require.NoError(t, os.Rename(a.procPath(100), a.procPath(100)+".gone"))
	fakeProc(t, a, 100)
	require.Equal(t, netns, fdID(t, p.netns), "the network namespace the agent holds")
	require.NotEqual(t, netns, pathID(t, a.procPath(100, "ns", "net")))
	p.close()

	for _, tc := range []struct {
		pid, uid int
		want     string
	}{
		{100, 0, "runs as uid 0, not the runner's 107"},
		{200, nodeagent.RunnerUID, "the asking process 200 is not in pod ns/vm-0: it does not have the pod's socket at /run/vmop-node"},
		{201, nodeagent.RunnerUID, "the asking process 201 is not in pod ns/vm-0"},
		{400, nodeagent.RunnerUID, "the asking process 400 is not in pod ns/vm-0"},
		{300, nodeagent.RunnerUID, "the asking process 300 is in the node's network namespace"},
		{500, nodeagent.RunnerUID, "the asking process 500: "},
	} {
		_, err := a.trustPeer(asRead(t, pod), tc.pid, tc.uid, sock)
		require.ErrorContains(t, err, tc.want)
		if tc.pid != 500 {
			require.ErrorIs(t, err, errRefused, "pid %d", tc.pid)
		}
	}
}
