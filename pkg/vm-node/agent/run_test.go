package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/kubeapi"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/syncbuffer"
)

// The tests here run the whole agent, Run, against a fake clientset, and
// are its VM pods' containers themselves: they offer the socket with
// nodeagent.Ask where the agent looks for it. The test process is then
// the peer the agent checks, and it does not run as the runner's user, so
// the agent refuses it before it looks at /proc; that refusal is the
// answer the tests see.

const node = "node-a"

// fakeAPI is the API server as the agent sees it: it lists and watches
// the test's pods that match the agent's query, as the API server's
// selectors do (a pod that stops matching is deleted from a watcher's
// view), and keeps the events the agent creates.
type fakeAPI struct {
	t        *testing.T
	mu       sync.Mutex
	pods     map[string]*corev1.Pod // by UID
	watchers map[*fakeWatch]bool
	queries  []url.Values
	events   []event
}

type fakeWatch struct {
	node, label, value string // spec.nodeName=node, label=value
	h                  kubeapi.Handler[Pod]
	seen               map[string]bool // the pods it was told of
}

func (w *fakeWatch) matches(p *corev1.Pod) bool {
	return p.Spec.NodeName == w.node && p.Labels[w.label] == w.value
}

func newFakeAPI(t *testing.T) *fakeAPI {
	return &fakeAPI{t: t, pods: map[string]*corev1.Pod{}, watchers: map[*fakeWatch]bool{}}
}

// Watch is Options.Watch.
func (f *fakeAPI) Watch(ctx context.Context, query url.Values, h kubeapi.Handler[Pod]) error {
	w := &fakeWatch{h: h, seen: map[string]bool{}}
	w.node, _ = strings.CutPrefix(query.Get("fieldSelector"), "spec.nodeName=")
	w.label, w.value, _ = strings.Cut(query.Get("labelSelector"), "=")
	f.mu.Lock()
	f.queries = append(f.queries, query)
	var list []Pod
	for _, p := range f.pods {
		if w.matches(p) {
			w.seen[string(p.UID)] = true
			list = append(list, *asRead(f.t, p))
		}
	}
	h.Replace(list)
	f.watchers[w] = true
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	delete(f.watchers, w)
	f.mu.Unlock()
	return nil
}

// Create is Options.Create.
func (f *fakeAPI) Create(_ context.Context, path string, obj any) error {
	e, ok := obj.(event)
	require.True(f.t, ok, "the agent creates %T at %s", obj, path)
	require.Equal(f.t, "/apis/events.k8s.io/v1/namespaces/"+e.Metadata.Namespace+"/events", path)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
	return nil
}

// set creates or changes a pod, and tells the watchers.
func (f *fakeAPI) set(p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, existed := f.pods[string(p.UID)]
	f.pods[string(p.UID)] = p.DeepCopy()
	for w := range f.watchers {
		uid := string(p.UID)
		switch {
		case w.matches(p) && existed && w.seen[uid]:
			w.h.Apply(kubeapi.Modified, *asRead(f.t, p))
		case w.matches(p):
			w.seen[uid] = true
			w.h.Apply(kubeapi.Added, *asRead(f.t, p))
		case w.seen[uid]:
			delete(w.seen, uid)
			w.h.Apply(kubeapi.Deleted, *asRead(f.t, p))
		}
	}
}

// delete deletes a pod, and tells the watchers.
func (f *fakeAPI) delete(p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, string(p.UID))
	for w := range f.watchers {
		if w.seen[string(p.UID)] {
			delete(w.seen, string(p.UID))
			w.h.Apply(kubeapi.Deleted, *asRead(f.t, p))
		}
	}
}

// eventList is the events the agent created so far.
func (f *fakeAPI) eventList() []event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]event(nil), f.events...)
}

// running is an agent that runs until its test ends.
type running struct {
	a    *Agent
	api  *fakeAPI
	root string // KubeletRootDir
	// links holds short links to pods' vm-node directories: a kubelet's
	// path is longer than a socket address may be (the agent itself dials
	// through a descriptor of the directory, which these tests check).
	links string
	pods  int // made by podDir
	log   syncbuffer.Buffer
}

// runAgent runs an agent for node in a fake cluster until t ends, and
// then checks that Run returned and that none of its pollers is left.
func runAgent(t *testing.T) *running {
	t.Helper()
	if os.Geteuid() == nodeagent.RunnerUID {
		t.Skipf("the test process is the peer the agent must refuse: it cannot run as the runner's uid %d", nodeagent.RunnerUID)
	}
	r := &running{api: newFakeAPI(t), root: t.TempDir()}
	links, err := os.MkdirTemp("", "vmop-agent")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(links) })
	r.links = links
	require.NoError(t, os.Mkdir(filepath.Join(r.root, "pods"), 0o755))
	r.a, err = New(Options{
		Watch: r.api.Watch, Create: r.api.Create, NodeName: node, KubeletRootDir: r.root,
		RunnerRepositories: []string{runnerRepo},
		Log:                slog.New(slog.NewTextHandler(&r.log, nil)),
		// Empty: the agent refuses the test's process before it looks at
		// any process.
		Proc: t.TempDir(),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
		eventually.Within(t, 5*time.Second, func() string {
			if n := pollerGoroutines(); n != 0 {
				return fmt.Sprintf("%d pollers still run after Run returned", n)
			}
			return ""
		})
		if t.Failed() {
			t.Logf("the agent's log:\n%s", r.log.String())
		}
	})
	return r
}

// podDir makes a VM pod named name on nodeName, changed by change, and
// the kubelet's directory of its vm-node volume; it returns the pod, not
// yet created, and the path of the socket its containers offer.
func (r *running) podDir(t *testing.T, name, nodeName string, change func(*corev1.Pod)) (*corev1.Pod, string) {
	t.Helper()
	p := vmPod()
	p.Name = name
	// A UID as long as the API server's, which a kubelet's paths have.
	p.UID = types.UID(fmt.Sprintf("%08x-1c9a-4b53-9d3a-6f0c2f1d2e3a", r.pods))
	r.pods++
	p.Spec.NodeName = nodeName
	if change != nil {
		change(p)
	}
	dir := filepath.Join(r.root, "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", nodeagent.Volume)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	link := filepath.Join(r.links, name)
	require.NoError(t, os.Symlink(dir, link))
	return p, filepath.Join(link, nodeagent.Socket)
}

// addPod makes a VM pod as podDir does, and creates it.
func (r *running) addPod(t *testing.T, name, nodeName string, change func(*corev1.Pod)) (*corev1.Pod, string) {
	t.Helper()
	p, socket := r.podDir(t, name, nodeName, change)
	r.create(t, p)
	return p, socket
}

func (r *running) create(t *testing.T, p *corev1.Pod) {
	t.Helper()
	r.api.set(p)
}

// refusal is how the agent refuses the test's process.
func refusal() string {
	return fmt.Sprintf("the node agent: refused: the process that asks runs as uid %d, not the runner's %d", os.Geteuid(), nodeagent.RunnerUID)
}

// ask offers socket until the agent answers it, or for within, and
// returns Ask's error.
func ask(t *testing.T, socket string, within time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	_, err := nodeagent.Ask(ctx, socket, nodeagent.Request{})
	return err
}

// answerWithin is how long a test waits for an answer it expects: the
// informer's first list, then a poll.
const answerWithin = 10 * time.Second

// unanswered is how long an ask that must not be answered is offered:
// several polls of a starting pod.
const unanswered = 4 * pollStarting

// pollerGoroutines counts the goroutines of pollers, of every agent of
// the test process.
func pollerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, ".(*Agent).newPoller.func") {
			count++
		}
	}
	return count
}

// TestRunRefusesAnotherUser runs the agent for a trusted VM pod whose
// asking process is not the runner's user: the container gets the
// refusal as its answer, and the pod a Warning event.
func TestRunRefusesAnotherUser(t *testing.T) {
	r := runAgent(t)
	pod, socket := r.addPod(t, "vm-0", node, nil)

	require.EqualError(t, ask(t, socket, answerWithin), refusal())
	var events []event
	eventually.Succeeds(t, 10*time.Second, func() error {
		if events = r.api.eventList(); len(events) == 0 {
			return fmt.Errorf("no %s event", EventRefused)
		}
		return nil
	})
	e := events[0]
	require.Equal(t, EventRefused, e.Reason)
	require.Equal(t, "Warning", e.Type)
	require.Equal(t, regarding{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, e.Regarding)
	require.Equal(t, "vm-node", e.ReportingController)
	require.Equal(t, "Prepare", e.Action)
	require.Equal(t, strings.TrimPrefix(refusal(), "the node agent: "), e.Note)
}

// TestWarnOnce: a pod that is refused again and again, as one that
// offers its socket again would be, gets one event for each new refusal.
func TestWarnOnce(t *testing.T) {
	r := runAgent(t)
	pod, _ := r.addPod(t, "vm-0", node, nil)
	eventually.Succeeds(t, 5*time.Second, func() error {
		if r.a.pod(string(pod.UID)) == nil {
			return errors.New("the agent has not seen the pod")
		}
		return nil
	})
	p := asRead(t, pod)
	for _, note := range []string{"one", "one", "two", "two", "one"} {
		require.NoError(t, r.a.warn(t.Context(), p, EventRefused, "Prepare", note))
	}
	var notes []string
	for _, e := range r.api.eventList() {
		notes = append(notes, e.Note)
	}
	require.Equal(t, []string{"one", "two", "one"}, notes)
}

// TestRunServesOnlyItsNodesVMPods offers sockets for pods the agent must
// not serve, before the pods exist: pods of another node or of none, and
// pods without vmop's labels. A VM pod of the node made after them is
// answered; they are not, and have no poller.
func TestRunServesOnlyItsNodesVMPods(t *testing.T) {
	r := runAgent(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	answers := map[string]chan error{}
	for _, tc := range []struct {
		name, node string
		change     func(*corev1.Pod)
	}{
		{"other-node", "node-b", nil},
		{"unscheduled", "", nil},
		{"unlabelled", node, func(p *corev1.Pod) { p.Labels = nil }},
		{"other-manager", node, func(p *corev1.Pod) { p.Labels[vmpod.LabelManagedBy] = "someone-else" }},
	} {
		p, socket := r.podDir(t, tc.name, tc.node, tc.change)
		answer := make(chan error, 1)
		answers[tc.name] = answer
		go func() {
			_, err := nodeagent.Ask(ctx, socket, nodeagent.Request{})
			answer <- err
		}()
		// An agent that took the pod would find its socket at once.
		eventually.Succeeds(t, 5*time.Second, func() error {
			_, err := os.Stat(socket)
			return err
		})
		r.create(t, p)
	}

	// Pods reach the agent in order: once it answers this one, it has
	// had the others, and polls them (if it did) as often.
	_, socket := r.addPod(t, "vm-0", node, nil)
	require.EqualError(t, ask(t, socket, answerWithin), refusal())
	time.Sleep(unanswered)
	cancel()
	for name, answer := range answers {
		require.ErrorIs(t, <-answer, context.Canceled, "%s was answered", name)
	}
	require.Equal(t, 1, pollerGoroutines(), "the pollers: vm-0's only")

	// What the agent asked for is what the API server filters.
	require.Equal(t, []url.Values{{
		"fieldSelector": {"spec.nodeName=" + node},
		"labelSelector": {vmpod.LabelManagedBy + "=" + vmpod.ManagedBy},
	}}, r.api.queries)
}

// TestRunStopsPollers ends a pod the agent serves: its poller ends, and
// a socket offered at its path again is not answered.
func TestRunStopsPollers(t *testing.T) {
	for name, end := range map[string]func(*fakeAPI, *corev1.Pod){
		"deleted": (*fakeAPI).delete,
		"succeeded": func(f *fakeAPI, p *corev1.Pod) {
			p.Status.Phase = corev1.PodSucceeded
			f.set(p)
		},
		"failed": func(f *fakeAPI, p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			f.set(p)
		},
		// The API server's watch deletes the pod from the agent's view.
		"unlabelled": func(f *fakeAPI, p *corev1.Pod) {
			p.Labels = nil
			f.set(p)
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := runAgent(t)
			pod, socket := r.addPod(t, "vm-0", node, nil)
			require.EqualError(t, ask(t, socket, answerWithin), refusal())
			require.Equal(t, 1, pollerGoroutines())

			end(r.api, pod)
			eventually.Within(t, 5*time.Second, func() string {
				if n := pollerGoroutines(); n != 0 {
					return fmt.Sprintf("%d pollers", n)
				}
				return ""
			})
			require.ErrorIs(t, ask(t, socket, unanswered), context.DeadlineExceeded)
		})
	}
}

// TestRunAnswersEachAsk asks again and again for one pod, as its
// containers do one after another (the import init container, then the
// runner) in the same directory: each ask is answered, though a new
// socket may have the inode of the one before (on ext4 it does).
func TestRunAnswersEachAsk(t *testing.T) {
	r := runAgent(t)
	_, socket := r.addPod(t, "vm-0", node, nil)
	for i := range 4 {
		require.EqualError(t, ask(t, socket, answerWithin), refusal(), "ask %d", i+1)
	}
}

// TestRunFollowsNoLink has a pod's socket be a link to a socket of the
// node (as /proc/1/root/run/containerd/containerd.sock would be, which
// the agent reaches in the host's PID namespace): the agent connects to
// a socket in the pod's directory only, never to one a pod names.
func TestRunFollowsNoLink(t *testing.T) {
	r := runAgent(t)
	p, socket := r.podDir(t, "vm-0", node, nil)
	host := filepath.Join(r.links, "host.sock")
	l, err := net.Listen("unix", host)
	require.NoError(t, err)
	defer l.Close()
	connected := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
			connected <- struct{}{}
		}
	}()
	require.NoError(t, os.Symlink(host, socket))
	r.create(t, p)
	select {
	case <-connected:
		t.Fatal("the agent connected to the socket a link in the pod's directory names")
	case <-time.After(unanswered):
	}
	require.Contains(t, r.log.String(), "agent.sock is not a socket")
	// A socket in the link's place is answered.
	require.EqualError(t, ask(t, socket, answerWithin), refusal())
}

// TestRunRefusesBeforeReading has a pod the agent refuses send a
// request of 100 MiB: it gets the refusal, and the agent takes what the
// socket buffers at most, not the request.
func TestRunRefusesBeforeReading(t *testing.T) {
	r := runAgent(t)
	_, socket := r.addPod(t, "vm-0", node, nil)
	tmp := socket + ".tmp"
	l, err := net.Listen("unix", tmp)
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, os.Rename(tmp, socket))
	c, err := l.Accept()
	require.NoError(t, err)
	defer c.Close()
	var sent atomic.Int64
	go func() {
		buf := []byte(strings.Repeat(" ", 64<<10))
		for sent.Load() < 100<<20 {
			n, err := c.Write(buf)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	var resp nodeagent.Response
	require.NoError(t, json.NewDecoder(c).Decode(&resp))
	require.Equal(t, strings.TrimPrefix(refusal(), "the node agent: "), resp.Error)
	require.Less(t, sent.Load(), int64(4<<20), "bytes the agent took")
}
