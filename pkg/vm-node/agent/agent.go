// Package agent is the part of vm-node that serves VM pods: it watches
// the pods of its node that vmop renders, finds the socket a container of
// such a pod offers in its nodeagent.Volume (through the kubelet's pod
// directories, so the pod mounts no host path), and does what that
// container asks and only root can, inside that pod's own namespaces: the
// ownership of the pod's devices, and the guest's side of the pod network.
// It acts only for a container it trusts (see trust.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/kubeapi"
	"github.com/vmop/vmop/pkg/vmpod"
)

// Options configure an Agent.
type Options struct {
	// Watch lists and then watches the pods that match query, telling h,
	// until ctx ends: kubeapi.Watch of the pods in vm-node.
	Watch func(ctx context.Context, query url.Values, h kubeapi.Handler[Pod]) error
	// Create creates an object at an API path: kubeapi.Client's in vm-node.
	Create   func(ctx context.Context, path string, obj any) error
	NodeName string
	// KubeletRootDir is the kubelet's --root-dir, as the agent sees it.
	KubeletRootDir string
	// RunnerRepositories are the image repositories (no tag) of runner
	// images the agent trusts.
	RunnerRepositories []string
	Log                *slog.Logger
	// Proc is the host's /proc (the agent runs in the host's PID
	// namespace); a variable for tests.
	Proc string
}

// Agent serves the VM pods of one node.
type Agent struct {
	o        Options
	trusted  map[string]bool
	instance string // reportingInstance of its events

	ctx     context.Context // Run's
	mu      sync.Mutex
	pods    map[string]*Pod // by UID
	pollers map[string]*poller
	warned  map[string]warning // the last Warning event of each pod
	synced  bool
}

// Intervals at which a pod's socket is looked for: often while the pod
// starts (its containers ask then), rarely once it is ready.
const (
	pollStarting = 200 * time.Millisecond
	pollReady    = 5 * time.Second
)

// EventRefused is the reason of the Warning event on a pod the agent
// refuses.
const EventRefused = "NodeAgentRefused"

// New makes an agent; Run starts it.
func New(o Options) (*Agent, error) {
	if o.Proc == "" {
		o.Proc = "/proc"
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	host, _ := os.Hostname()
	a := &Agent{
		o: o, trusted: map[string]bool{}, instance: "vm-node-" + host,
		pods: map[string]*Pod{}, pollers: map[string]*poller{}, warned: map[string]warning{},
	}
	for _, r := range o.RunnerRepositories {
		repo, err := repository(r)
		if err != nil {
			return nil, fmt.Errorf("runner repository %q: %w", r, err)
		}
		a.trusted[repo] = true
	}
	if len(a.trusted) == 0 {
		return nil, errors.New("no runner repository to trust")
	}
	return a, nil
}

// Query selects the pods an agent serves: the VM pods of its node, as the
// API server filters them.
func Query(node string) url.Values {
	return url.Values{
		"fieldSelector": {"spec.nodeName=" + node},
		"labelSelector": {vmpod.LabelManagedBy + "=" + vmpod.ManagedBy},
	}
}

// Run watches the node's VM pods and serves them until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	a.ctx = ctx
	err := a.o.Watch(ctx, Query(a.o.NodeName), a)
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid, p := range a.pollers {
		p.stop()
		delete(a.pollers, uid)
	}
	return err
}

// Replace makes the pods the agent serves those of pods, once it listed
// them (kubeapi.Handler).
func (a *Agent) Replace(pods []Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := map[string]bool{}
	for i := range pods {
		now[pods[i].UID] = true
		a.update(&pods[i])
	}
	for uid := range a.pods {
		if !now[uid] {
			a.remove(uid)
		}
	}
	if !a.synced {
		a.synced = true
		a.o.Log.Info("Serving the VM pods of the node", "node", a.o.NodeName, "kubeletRootDir", a.o.KubeletRootDir, "pods", len(pods))
	}
}

// Apply takes a change of a pod the agent watches (kubeapi.Handler).
func (a *Agent) Apply(typ kubeapi.EventType, pod Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if typ == kubeapi.Deleted {
		a.remove(pod.UID)
		return
	}
	a.update(&pod)
}

// update starts a pod's poller, and sets how often it looks; its caller
// holds a.mu.
func (a *Agent) update(pod *Pod) {
	if pod.Status.Phase == "Succeeded" || pod.Status.Phase == "Failed" {
		a.remove(pod.UID)
		return
	}
	a.pods[pod.UID] = pod
	p := a.pollers[pod.UID]
	if p == nil {
		p = a.newPoller(a.ctx, pod)
		a.pollers[pod.UID] = p
	}
	p.setReady(pod.ready())
}

// remove stops serving a pod; its caller holds a.mu.
func (a *Agent) remove(uid string) {
	if p := a.pollers[uid]; p != nil {
		p.stop()
		delete(a.pollers, uid)
	}
	delete(a.pods, uid)
	delete(a.warned, uid)
}

// pod is the pod of uid as last seen, nil once gone.
func (a *Agent) pod(uid string) *Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods[uid]
}

// poller looks for the socket of one pod.
type poller struct {
	stop  context.CancelFunc
	ready chan bool
}

// setReady replaces what the poller was told; its caller holds a.mu.
func (p *poller) setReady(r bool) {
	select {
	case <-p.ready:
	default:
	}
	p.ready <- r
}

func (a *Agent) newPoller(ctx context.Context, pod *Pod) *poller {
	ctx, cancel := context.WithCancel(ctx)
	p := &poller{stop: cancel, ready: make(chan bool, 1)}
	uid := pod.UID
	dir := filepath.Join(a.o.KubeletRootDir, "pods", uid, "volumes", "kubernetes.io~empty-dir", nodeagent.Volume)
	go func() {
		interval := pollStarting
		t := time.NewTimer(0)
		defer t.Stop()
		var served fileID // the socket last served, until it is gone
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-p.ready:
				interval = pollStarting
				if r {
					interval = pollReady
				}
				continue
			case <-t.C:
			}
			t.Reset(interval)
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(dir, nodeagent.Socket), &st); err != nil {
				// Gone (Ask removes it once answered): the next is new.
				served = fileID{}
				continue
			}
			if id := statID(&st); id != served {
				served = id
				a.serve(ctx, uid, dir)
			}
		}
	}()
	return p
}

// serve connects to a pod's socket and answers its container.
func (a *Agent) serve(ctx context.Context, uid, dir string) {
	pod := a.pod(uid)
	if pod == nil {
		return
	}
	log := a.o.Log.With("pod", pod.Namespace+"/"+pod.Name)
	c, sock, err := dialIn(dir, nodeagent.Socket)
	if err != nil {
		log.Warn("Cannot reach the pod's socket", "err", err)
		return
	}
	defer c.Close()
	pid, uidPeer, err := peer(c)
	if err != nil {
		log.Warn("Cannot tell who offers the pod's socket", "err", err)
		return
	}
	// Trust first: a pod the agent refuses has no say in what the agent
	// reads, or for how long.
	err = a.trustPod(pod)
	var proc *process
	if err == nil {
		proc, err = a.trustPeer(pod, pid, uidPeer, sock)
	}
	if err != nil {
		_ = nodeagent.Reply(c, nodeagent.Response{Error: err.Error()})
		a.refused(ctx, log, pod, err)
		return
	}
	defer proc.close()
	h := &handler{pod: pod, proc: proc}
	var failed error
	err = nodeagent.Answer(c, func(req nodeagent.Request) nodeagent.Response {
		resp, err := h.handle(ctx, req)
		if err != nil {
			failed = err
			return nodeagent.Response{Error: err.Error()}
		}
		return resp
	})
	switch {
	case failed != nil:
		a.refused(ctx, log, pod, failed)
	case err != nil:
		log.Warn("Answering the pod", "err", err)
	default:
		log.Info("Prepared a container of the pod", "pid", pid)
	}
}

// refused logs why the agent did not serve a pod, and, when it refused
// the pod, tells the pod's owner in a Warning event.
func (a *Agent) refused(ctx context.Context, log *slog.Logger, pod *Pod, err error) {
	if !errors.Is(err, errRefused) {
		log.Warn("Cannot prepare the pod", "err", err)
		return
	}
	log.Warn("Refused", "err", err)
	if err := a.warn(ctx, pod, EventRefused, "Prepare", err.Error()); err != nil {
		log.Warn("Cannot tell the pod's owner in an event", "err", err)
	}
}

// dialIn connects to the socket name in dir through descriptors, and
// tells which socket it is: the path of a kubelet's pod directory may be
// longer than a socket address, and the pod owns dir, so name may be a
// link to a socket elsewhere (one of the node's, through /proc/1/root),
// which connect would follow.
func dialIn(dir, name string) (net.Conn, fileID, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fileID{}, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fileID{}, fmt.Errorf("%s: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fileID{}, fmt.Errorf("%s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fileID{}, fmt.Errorf("%s is not a socket", name)
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	return c, statID(&st), err
}

// peer is the pid (in the agent's, the host's, PID namespace) and the
// uid of the process that offered the socket c is connected to.
func peer(c net.Conn) (pid, uid int, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, cerr
	}
	if cred.Pid == 0 {
		return 0, 0, errors.New("the peer's process is not in the agent's PID namespace (does the agent run with hostPID?)")
	}
	return int(cred.Pid), int(cred.Uid), nil
}

// procPath is a path under the host's /proc.
func (a *Agent) procPath(pid int, rest ...string) string {
	return filepath.Join(append([]string{a.o.Proc, fmt.Sprint(pid)}, rest...)...)
}
