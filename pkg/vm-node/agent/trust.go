package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/vmop/vmop/pkg/nodeagent"
	"github.com/vmop/vmop/pkg/render"
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
// must run a runner image of a trusted repository (vm-runner, vmop's own
// code), unprivileged, in the pod's own network, PID and IPC namespaces.
// A container that asks can then only ask for what vm-runner asks.
func (a *Agent) trustPod(pod *corev1.Pod) error {
	if pod.Labels[render.LabelManagedBy] != render.ManagedBy {
		return refuse("pod %s/%s is not labelled %s=%s", pod.Namespace, pod.Name, render.LabelManagedBy, render.ManagedBy)
	}
	if pod.Spec.HostNetwork || pod.Spec.HostPID || pod.Spec.HostIPC {
		return refuse("pod %s/%s shares a namespace of the node: the agent acts only inside a pod's own", pod.Namespace, pod.Name)
	}
	var containers []corev1.Container
	containers = append(containers, pod.Spec.InitContainers...)
	containers = append(containers, pod.Spec.Containers...)
	for _, e := range pod.Spec.EphemeralContainers {
		containers = append(containers, corev1.Container(e.EphemeralContainerCommon))
	}
	asking := 0
	for _, c := range containers {
		if !mounts(c, nodeagent.Volume) {
			continue
		}
		asking++
		repo, err := repository(c.Image)
		if err != nil || !a.trusted[repo] {
			return refuse("container %s of pod %s/%s runs image %s, not a vmop runner image the node agent trusts (%s)", c.Name, pod.Namespace, pod.Name, c.Image, strings.Join(a.o.RunnerRepositories, ", "))
		}
		if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			return refuse("container %s of pod %s/%s is privileged and needs no node agent", c.Name, pod.Namespace, pod.Name)
		}
	}
	if asking == 0 {
		return refuse("no container of pod %s/%s mounts volume %s", pod.Namespace, pod.Name, nodeagent.Volume)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == nodeagent.Volume && v.EmptyDir == nil {
			return refuse("volume %s of pod %s/%s is not an emptyDir", v.Name, pod.Namespace, pod.Name)
		}
	}
	return nil
}

func mounts(c corev1.Container, volume string) bool {
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

// trustPeer says whether process pid, which offered the socket sock as
// uid, is a container of the pod running as the runner's user, and
// returns that container's root, opened, for the work that follows. That
// it is the pod's: it sees sock, in the pod's emptyDir, at the path where
// the pod's containers mount it, and only that pod's containers mount
// that emptyDir; trustPod made sure the pod shares no namespace of the
// node. (Cgroup paths need not name the pod: that depends on the
// kubelet's cgroup driver. The node's pid 1 need not show its namespaces,
// even to root.)
func (a *Agent) trustPeer(pod *corev1.Pod, pid, uid int, sock fileID) (root int, err error) {
	if uid != nodeagent.RunnerUID {
		return -1, refuse("the process that asks runs as uid %d, not the runner's %d", uid, nodeagent.RunnerUID)
	}
	root, err = unix.Open(a.procPath(pid, "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("the root of the asking process %d: %w", pid, err)
	}
	fd, st, err := openInRoot(root, filepath.Join(nodeagent.Dir, nodeagent.Socket))
	if err == nil {
		unix.Close(fd)
	}
	if err != nil || statID(&st) != sock {
		unix.Close(root)
		return -1, refuse("the asking process %d is not in pod %s/%s: it does not have the pod's socket at %s", pid, pod.Namespace, pod.Name, nodeagent.Dir)
	}
	return root, nil
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
