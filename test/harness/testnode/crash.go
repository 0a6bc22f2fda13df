package testnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmop/vmop/test/harness/testcluster"
)

// Crash SIGKILLs at once every process of the node, as a node that
// crashes loses them: the kubelet, containerd, its shims, every container
// process (a VM's runner and qemu among them) and kube-proxy. They are
// all stopped (SIGSTOP) first, until no new one appears, and then killed
// together, so that none sees another die and reacts (a shim reporting
// its container's exit, containerd writing that down). Boot starts the
// node again.
//
// The control plane (API server, etcd, scheduler, controller-manager)
// keeps running: it stands for the control plane's own nodes, which the
// crash of this worker does not reach.
//
// What the kernel holds survives: the host's page cache, mounts, loop
// devices, network namespaces and rules. So this is every process of the
// node crashing at one instant, not a power loss: data that a process had
// handed to the kernel is still there, and only what was in the processes'
// own memory is gone.
func (n *Node) Crash() error {
	if n.Kubelet == nil || n.Containerd == nil || n.KubeProxy == nil {
		return errors.New("the node is not running")
	}
	roots := []int{n.Kubelet.Pid(), n.Containerd.Pid(), n.KubeProxy.Pid()}
	stopped := map[int]bool{}
	// Until a pass finds no new process: one may fork while the others
	// are being stopped, but not once it is stopped itself.
	for {
		found := n.nodeProcesses(roots)
		added := false
		for _, pid := range found {
			if !stopped[pid] {
				_ = syscall.Kill(pid, syscall.SIGSTOP)
				stopped[pid] = true
				added = true
			}
		}
		if !added {
			break
		}
	}
	for pid := range stopped {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// The test's children are reaped by their Wait; the others (the
	// shims, daemons, and what they started) by whoever inherits them.
	var left []string
	deadline := time.Now().Add(30 * time.Second)
	for pid := range stopped {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			left = append(left, strconv.Itoa(pid))
		}
	}
	for _, done := range []<-chan struct{}{n.Kubelet.Done(), n.KubeProxy.Done(), n.Containerd.Exited()} {
		select {
		case <-done:
		case <-time.After(time.Until(deadline) + time.Second):
			left = append(left, "a child of the test")
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("processes of the node still alive 30 s after SIGKILL: %s", strings.Join(left, " "))
	}
	return nil
}

// nodeProcesses are roots, containerd's shims (whose command line names
// containerd's socket) and every descendant of those.
func (n *Node) nodeProcesses(roots []int) []int {
	parent := map[int]int{}
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		ppid, ok := parentPid(pid)
		if !ok {
			continue
		}
		parent[pid] = ppid
		pids = append(pids, pid)
	}
	ours := map[int]bool{}
	for _, pid := range roots {
		ours[pid] = true
	}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for _, arg := range args[1:] {
			if underAny(arg, []string{n.Containerd.Dir}) {
				ours[pid] = true
				break
			}
		}
	}
	// A descendant is ours when an ancestor is.
	var found []int
	for _, pid := range pids {
		for p, depth := pid, 0; p > 1 && depth < 64; p, depth = parent[p], depth+1 {
			if ours[p] {
				found = append(found, pid)
				break
			}
		}
	}
	return found
}

// parentPid reads a process's parent from /proc; false once it is gone.
func parentPid(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// alive says whether a process is there and not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// Boot starts the node again after Crash, with the same settings and
// state: containerd on its root and state (its images, and the
// containers and sandboxes the kubelet made, all dead now), the kubelet
// on its root directory, and kube-proxy; it waits until the node is Ready
// and untainted, as Start does. The kubelet then finds its pods' sandboxes
// gone and makes them again. The logs of the killed kubelet and kube-proxy
// are kept beside the new ones (.crashed).
func (n *Node) Boot(ctx context.Context) error {
	if err := n.rerunContainerd(); err != nil {
		return fmt.Errorf("containerd after the crash: %w", err)
	}
	for _, p := range []*testcluster.Process{n.Kubelet, n.KubeProxy} {
		_ = os.Rename(p.Log, p.Log+".crashed")
	}
	if err := n.runKubelet(ctx); err != nil {
		return fmt.Errorf("kubelet after the crash: %w", err)
	}
	if err := n.startKubeProxy(ctx); err != nil {
		return fmt.Errorf("kube-proxy after the crash: %w", err)
	}
	return nil
}
