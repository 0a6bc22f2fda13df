package agent

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"golang.org/x/sys/unix"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/vmpod"
)

// errRefused marks the answers to a container the agent does not trust.
var errRefused = errors.New("refused")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errRefused, fmt.Sprintf(format, args...))
}

// repository is an image reference's repository, as the registry names
// it (docker.io/library/x for x), without tag or digest.
func repository(image string) (string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", err
	}
	return ref.Context().Name(), nil
}

// trustPod says whether the agent may act for pod. Labels say which pods
// to look at, not which to trust: anyone who may create a pod can copy
// them. What the agent trusts is what runs: only the containers that
// mount the pod's nodeagent.Volume can reach the socket, and each of them
// must be one vmop makes (nodeagent.Containers): vm-runner of a trusted
// repository, with vmop's command, arguments, environment and mounts,
// unprivileged, in the pod's own namespaces, with no other container
// that sees its processes.
func (a *Agent) trustPod(pod *Pod) error {
	if pod.Labels[vmpod.LabelManagedBy] != vmpod.ManagedBy {
		return refuse("pod %s/%s is not labelled %s=%s", pod.Namespace, pod.Name, vmpod.LabelManagedBy, vmpod.ManagedBy)
	}
	if pod.Spec.HostNetwork || pod.Spec.HostPID || pod.Spec.HostIPC {
		return refuse("pod %s/%s shares a namespace of the node: the agent acts only inside a pod's own", pod.Namespace, pod.Name)
	}
	if p := pod.Spec.ShareProcessNamespace; p != nil && *p {
		return refuse("pod %s/%s shares its process namespace: its other containers would reach the runner's processes", pod.Namespace, pod.Name)
	}
	volumes := map[string]Volume{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			return refuse("pod %s/%s has a host path (volume %s)", pod.Namespace, pod.Name, v.Name)
		}
		volumes[v.Name] = v
	}
	if v, ok := volumes[nodeagent.Volume]; ok && v.EmptyDir == nil {
		return refuse("volume %s of pod %s/%s is not an emptyDir", v.Name, pod.Namespace, pod.Name)
	}
	// asking: the image the spec names, of each container that may ask.
	asking := map[string]string{}
	for _, c := range append(append([]Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if !mounts(c, nodeagent.Volume) {
			continue
		}
		asking[c.Name] = c.Image
		if err := a.trustContainer(c, volumes); err != nil {
			return refuse("container %s of pod %s/%s %s", c.Name, pod.Namespace, pod.Name, err)
		}
	}
	if len(asking) == 0 {
		return refuse("no container of pod %s/%s mounts volume %s", pod.Namespace, pod.Name, nodeagent.Volume)
	}
	for _, e := range pod.Spec.EphemeralContainers {
		if _, target := asking[e.TargetContainerName]; target || mounts(e.Container, nodeagent.Volume) {
			return refuse("ephemeral container %s of pod %s/%s reaches the processes or the socket of a container the agent serves", e.Name, pod.Namespace, pod.Name)
		}
	}
	return a.trustImages(pod, asking)
}

// trustImages checks what the asking containers run, by the pod's
// status: a running pod's image may be changed in its spec, and the
// container runs the image before until the kubelet restarts it. Each
// one that runs must run an image of a trusted repository, and the very
// digest its spec names, if it names one.
func (a *Agent) trustImages(pod *Pod, asking map[string]string) error {
	for _, s := range append(append([]ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		image, ok := asking[s.Name]
		if !ok || s.State.Running == nil {
			continue
		}
		// The image as the runtime names it; an image ID alone
		// ("sha256:...") names no repository.
		if repo, err := repository(s.Image); err == nil && !a.trusted[repo] {
			return refuse("container %s of pod %s/%s still runs image %s, not a vmop runner image the node agent trusts", s.Name, pod.Namespace, pod.Name, s.Image)
		}
		// The digest it runs: repository@sha256:..., after a scheme
		// with some runtimes (docker-pullable://).
		id := s.ImageID
		if _, after, ok := strings.Cut(id, "://"); ok {
			id = after
		}
		running, err := name.NewDigest(id)
		if err != nil {
			continue
		}
		if !a.trusted[running.Context().Name()] {
			return refuse("container %s of pod %s/%s runs image %s, not a vmop runner image the node agent trusts", s.Name, pod.Namespace, pod.Name, id)
		}
		if want, err := name.NewDigest(image); err == nil && want.DigestStr() != running.DigestStr() {
			return refuse("container %s of pod %s/%s runs image %s, not %s", s.Name, pod.Namespace, pod.Name, id, image)
		}
	}
	return nil
}

// trustContainer says, in words after "container NAME", why c is not a
// container of nodeagent.Containers, running vm-runner of a trusted
// repository; nil if it is one.
func (a *Agent) trustContainer(c Container, volumes map[string]Volume) error {
	repo, err := repository(c.Image)
	if err != nil || !a.trusted[repo] {
		return fmt.Errorf("runs image %s, not a vmop runner image the node agent trusts (%s)", c.Image, strings.Join(a.o.RunnerRepositories, ", "))
	}
	if sc := c.SecurityContext; sc != nil && (sc.Privileged != nil && *sc.Privileged || sc.Capabilities != nil && len(sc.Capabilities.Add) > 0) {
		return errors.New("is privileged or adds capabilities, and needs no node agent")
	}
	var shape *nodeagent.Container
	for i, s := range nodeagent.Containers {
		if slices.Equal(c.Command, s.Command) && slices.Equal(c.Args, s.Args) {
			shape = &nodeagent.Containers[i]
		}
	}
	if shape == nil {
		return fmt.Errorf("runs %q, not a command of vmop's", append(append([]string{}, c.Command...), c.Args...))
	}
	env := nodeagent.Env()
	if len(c.EnvFrom) > 0 || len(c.Env) != len(env) {
		return fmt.Errorf("has an environment other than vmop's (%s)", nodeagent.EnvSocket)
	}
	for _, e := range c.Env {
		if v, ok := env[e.Name]; !ok || e.ValueFrom != nil || e.Value != v {
			return fmt.Errorf("sets %s, which vmop does not", e.Name)
		}
	}
	if c.WorkingDir != "" || c.Lifecycle != nil {
		return errors.New("has a working directory or lifecycle hooks, which vmop does not set")
	}
	for _, p := range []*Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p != nil && p.Exec != nil && !slices.Equal(p.Exec.Command, nodeagent.ReadinessCommand) && !slices.Equal(p.Exec.Command, nodeagent.LivenessCommand) {
			return fmt.Errorf("has a probe that runs %q", p.Exec.Command)
		}
	}
	for _, m := range c.VolumeMounts {
		if !nodeagent.MountAllowed(m.MountPath) {
			return fmt.Errorf("mounts volume %s at %s, where vmop mounts none", m.Name, m.MountPath)
		}
		// An emptyDir may hold what another container left there.
		if v := volumes[m.Name]; v.EmptyDir != nil && m.Name != nodeagent.Volume &&
			(!shape.Scratch || path.Clean(m.MountPath) != vmpod.ImportScratchDir) {
			return fmt.Errorf("mounts emptyDir %s at %s, where the %s vmop makes mounts none", m.Name, m.MountPath, shape.Name)
		}
	}
	for _, d := range c.VolumeDevices {
		if path.Dir(d.DevicePath) != "/dev" {
			return fmt.Errorf("has device %s outside /dev", d.DevicePath)
		}
	}
	return nil
}

func mounts(c Container, volume string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return true
		}
	}
	return false
}

// fileID tells a file from another, also from the one before it at the
// same path: a filesystem may give a new file the inode of one just
// removed (ext4 does, at once), so that a pod's second ask, e.g. its
// runner's after its import container's, would look like the first one,
// served already. The change time of a new file differs.
type fileID struct {
	dev, ino uint64
	ctime    unix.Timespec
}

func statID(st *unix.Stat_t) fileID {
	return fileID{dev: uint64(st.Dev), ino: st.Ino, ctime: st.Ctim} //nolint:unconvert // Dev is not uint64 everywhere
}

// process is the asking process as the agent acts on it: its root and
// network namespace, both opened through one handle of its /proc
// directory, so that they are one process's even if the pid is reused.
type process struct {
	root, netns int
}

func (p *process) close() {
	unix.Close(p.root)
	unix.Close(p.netns)
}

// trustPeer says whether process pid, which offered the socket sock as
// uid, is a container of the pod running as the runner's user, in the
// pod's network namespace, and returns it, opened, for the work that
// follows. That it is the pod's: it sees sock, in the pod's emptyDir, at
// the path where the pod's containers mount it, and only that pod's
// containers mount that emptyDir; trustPod made sure the pod shares no
// namespace of the node. (Cgroup paths need not name the pod: that
// depends on the kubelet's cgroup driver.)
func (a *Agent) trustPeer(pod *Pod, pid, uid int, sock fileID) (*process, error) {
	if uid != nodeagent.RunnerUID {
		return nil, refuse("the process that asks runs as uid %d, not the runner's %d", uid, nodeagent.RunnerUID)
	}
	dir, err := unix.Open(a.procPath(pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the asking process %d: %w", pid, err)
	}
	defer unix.Close(dir)
	p := &process{root: -1, netns: -1}
	if p.root, err = unix.Openat(dir, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		p.netns, err = unix.Openat(dir, "ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("the asking process %d: %w", pid, err)
	}
	fd, st, err := openInRoot(p.root, filepath.Join(nodeagent.Dir, nodeagent.Socket))
	if err == nil {
		unix.Close(fd)
	}
	if err != nil || statID(&st) != sock {
		p.close()
		return nil, refuse("the asking process %d is not in pod %s/%s: it does not have the pod's socket at %s", pid, pod.Namespace, pod.Name, nodeagent.Dir)
	}
	if a.nodeNetns(p.netns) {
		p.close()
		return nil, refuse("the asking process %d is in the node's network namespace", pid)
	}
	return p, nil
}

// nodeNetns tells whether fd is the network namespace of the node (its
// first process's) or of the agent. (A node's pid 1 need not show its
// namespaces, even to root: then the pod's hostNetwork is what tells.)
func (a *Agent) nodeNetns(fd int) bool {
	var ns unix.Stat_t
	if unix.Fstat(fd, &ns) != nil {
		return true
	}
	for _, p := range []string{a.procPath(1, "ns", "net"), "/proc/self/ns/net"} {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Dev == ns.Dev && st.Ino == ns.Ino {
			return true
		}
	}
	return false
}

// openInRoot opens path inside the directory root (O_PATH), as if root
// were "/", following no link, and stats it: a container's paths, seen
// from the node, name nothing outside the container.
func openInRoot(root int, path string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Openat2(root, strings.TrimPrefix(path, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}
