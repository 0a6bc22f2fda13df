package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/podnet"
)

// handler answers one container of a pod, which the agent trusts.
type handler struct {
	pod  *Pod
	proc *process // the asking process
}

// agentDevices are the devices of the agent's device plugin, as a
// container has them.
var agentDevices = []string{"/dev/kvm", "/dev/net/tun", "/dev/vhost-net"}

func (h *handler) handle(_ context.Context, req nodeagent.Request) (nodeagent.Response, error) {
	if err := h.ownDevices(h.proc.root); err != nil {
		return nodeagent.Response{}, err
	}
	var resp nodeagent.Response
	if req.PodNetwork != nil {
		o := *req.PodNetwork
		o.TapOwner = nodeagent.RunnerUID
		err := inNetns(h.proc.netns, func() error {
			n, err := podnet.Setup(o)
			resp.PodNetwork = n
			return err
		})
		if err != nil {
			return nodeagent.Response{}, fmt.Errorf("pod network: %w", err)
		}
	}
	return resp, nil
}

// ownDevices gives the runner's user the devices the asking container
// has: the agent's, and the pod's Block volumes. The container runtime
// makes them with the node's owners (root), which a non-root qemu could
// not open. Paths are resolved inside the container's root, never
// following a link, so that the container can name nothing else.
func (h *handler) ownDevices(root int) error {
	paths := append([]string{}, agentDevices...)
	for _, c := range append(append([]Container{}, h.pod.Spec.InitContainers...), h.pod.Spec.Containers...) {
		for _, d := range c.VolumeDevices {
			paths = append(paths, d.DevicePath)
		}
	}
	for _, p := range paths {
		if err := ownDevice(root, p); err != nil {
			return err
		}
	}
	return nil
}

// ownDevice makes the device at path under root the runner's, if the
// container has it.
func ownDevice(root int, path string) error {
	fd, st, err := openInRoot(root, path)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("device %s: %w", path, err)
	}
	defer unix.Close(fd)
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFCHR && t != unix.S_IFBLK {
		return refuse("%s is not a device", path)
	}
	if err := unix.Fchownat(fd, "", nodeagent.RunnerUID, nodeagent.RunnerUID, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("giving device %s to the runner: %w", path, err)
	}
	return nil
}

// inNetns runs fn on a thread in the network namespace netns (a
// descriptor). The thread stays locked, so Go ends it with the
// goroutine: no other goroutine ever runs in that namespace.
func inNetns(netns int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(netns, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("entering the pod's network namespace: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}
