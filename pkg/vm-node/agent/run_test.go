package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/vmop/vmop/pkg/nodeagent"
	"github.com/vmop/vmop/pkg/render"
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

// fakeCluster is a fake clientset that, like the API server, lists and
// watches only the pods that match a request's field and label
// selectors: client-go's fake ignores the field selector of a list and
// every selector of a watch. A pod that stops matching a watch's
// selectors is deleted from its watcher's view, as the API server does.
func fakeCluster() *fake.Clientset {
	cs := fake.NewClientset()
	podFields := func(p *corev1.Pod) fields.Set {
		return fields.Set{
			"metadata.name":      p.Name,
			"metadata.namespace": p.Namespace,
			"spec.nodeName":      p.Spec.NodeName,
			"status.phase":       string(p.Status.Phase),
		}
	}
	matches := func(p *corev1.Pod, l labels.Selector, f fields.Selector) bool {
		return (l == nil || l.Matches(labels.Set(p.Labels))) && (f == nil || f.Matches(podFields(p)))
	}
	cs.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, k8sruntime.Object, error) {
		la := action.(k8stesting.ListActionImpl)
		obj, err := cs.Tracker().List(la.GetResource(), la.GetKind(), la.GetNamespace(), la.ListOptions)
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		var items []corev1.Pod
		for _, p := range list.Items {
			if matches(&p, la.ListRestrictions.Labels, la.ListRestrictions.Fields) {
				items = append(items, p)
			}
		}
		list.Items = items
		return true, list, nil
	})
	cs.PrependWatchReactor("pods", func(action k8stesting.Action) (bool, watch.Interface, error) {
		wa := action.(k8stesting.WatchActionImpl)
		r := wa.WatchRestrictions
		// The pods the watcher knows of: those that match now (it
		// listed them, or is sent them), then those it is sent.
		seen := map[types.UID]bool{}
		obj, err := cs.Tracker().List(wa.GetResource(), corev1.SchemeGroupVersion.WithKind("Pod"), wa.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		for _, p := range obj.(*corev1.PodList).Items {
			seen[p.UID] = matches(&p, r.Labels, r.Fields)
		}
		w, err := cs.Tracker().Watch(wa.GetResource(), wa.GetNamespace(), wa.ListOptions)
		if err != nil {
			return true, nil, err
		}
		return true, watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
			p, ok := e.Object.(*corev1.Pod)
			if !ok {
				return e, true
			}
			if matches(p, r.Labels, r.Fields) {
				seen[p.UID] = e.Type != watch.Deleted
				return e, true
			}
			if seen[p.UID] && e.Type == watch.Modified {
				delete(seen, p.UID)
				e.Type = watch.Deleted
				return e, true
			}
			return e, false
		}), nil
	})
	return cs
}

// running is an agent that runs until its test ends.
type running struct {
	a    *Agent
	cs   *fake.Clientset
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
	r := &running{cs: fakeCluster(), root: t.TempDir()}
	links, err := os.MkdirTemp("", "vmop-agent")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(links) })
	r.links = links
	require.NoError(t, os.Mkdir(filepath.Join(r.root, "pods"), 0o755))
	r.a, err = New(Options{
		Client: r.cs, NodeName: node, KubeletRootDir: r.root,
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
	_, err := r.cs.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
	require.NoError(t, err)
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
	eventually.Succeeds(t, 10*time.Second, func() error {
		list, err := r.cs.EventsV1().Events(pod.Namespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason != EventRefused {
				continue
			}
			require.Equal(t, corev1.EventTypeWarning, e.Type)
			require.Equal(t, corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, e.Regarding)
			require.Equal(t, "vm-node", e.ReportingController)
			require.Equal(t, "Prepare", e.Action)
			require.Equal(t, strings.TrimPrefix(refusal(), "the node agent: "), e.Note)
			return nil
		}
		return fmt.Errorf("no %s event in %d events", EventRefused, len(list.Items))
	})
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
		{"other-manager", node, func(p *corev1.Pod) { p.Labels[render.LabelManagedBy] = "someone-else" }},
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

	// What the agent asked the fake for is what the API server filters.
	var lists, watches int
	for _, a := range r.cs.Actions() {
		if a.GetResource().Resource != "pods" {
			continue
		}
		var l labels.Selector
		var f fields.Selector
		switch a := a.(type) {
		case k8stesting.ListActionImpl:
			lists++
			l, f = a.ListRestrictions.Labels, a.ListRestrictions.Fields
		case k8stesting.WatchActionImpl:
			watches++
			l, f = a.WatchRestrictions.Labels, a.WatchRestrictions.Fields
		default:
			continue
		}
		require.Equal(t, "spec.nodeName="+node, f.String(), a.GetVerb())
		require.Equal(t, render.LabelManagedBy+"="+render.ManagedBy, l.String(), a.GetVerb())
	}
	require.Positive(t, lists)
	require.Positive(t, watches)
}

// TestRunStopsPollers ends a pod the agent serves: its poller ends, and
// a socket offered at its path again is not answered.
func TestRunStopsPollers(t *testing.T) {
	for name, end := range map[string]func(context.Context, *running, *corev1.Pod) error{
		"deleted": func(ctx context.Context, r *running, p *corev1.Pod) error {
			return r.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		},
		"succeeded": func(ctx context.Context, r *running, p *corev1.Pod) error {
			p.Status.Phase = corev1.PodSucceeded
			_, err := r.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		},
		"failed": func(ctx context.Context, r *running, p *corev1.Pod) error {
			p.Status.Phase = corev1.PodFailed
			_, err := r.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		},
		// The API server's watch deletes the pod from the agent's view.
		"unlabelled": func(ctx context.Context, r *running, p *corev1.Pod) error {
			p.Labels = nil
			_, err := r.cs.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := runAgent(t)
			pod, socket := r.addPod(t, "vm-0", node, nil)
			require.EqualError(t, ask(t, socket, answerWithin), refusal())
			require.Equal(t, 1, pollerGoroutines())

			require.NoError(t, end(t.Context(), r, pod))
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
