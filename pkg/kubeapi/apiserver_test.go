package kubeapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/kubeapi"
	"github.com/vmop/vmop/test/harness/testcluster"
)

const managedBy = "app.kubernetes.io/managed-by"

// pod is what the agent reads of a pod.
type pod struct {
	Metadata struct {
		Name   string            `json:"name"`
		UID    string            `json:"uid"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
}

// changes passes what Watch reports to the test as "Replace [names]" and
// "ADDED name".
type changes chan string

func (ch changes) Replace(pods []pod) {
	var names []string
	for _, p := range pods {
		names = append(names, p.Metadata.Name)
	}
	slices.Sort(names)
	ch <- fmt.Sprintf("Replace %v", names)
}

func (ch changes) Apply(typ kubeapi.EventType, p pod) { ch <- string(typ) + " " + p.Metadata.Name }

// On a real API server, a watch of the pods of node n1 that vm-operator
// manages, with the kubeconfig's credentials: the list has those pods only,
// and the watch reports their creation, deletion and the removal of the
// label, and nothing of other pods. An events.k8s.io/v1 Event is created.
func TestOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	cs := c.Client()
	cfg, err := kubeapi.FromKubeconfig(c.Kubeconfig)
	require.NoError(t, err)
	cfg.UserAgent = "vm-node-test"
	client, err := kubeapi.New(cfg)
	require.NoError(t, err)

	createPod(t, cs, "existing", "n1", true)
	createPod(t, cs, "other-node", "n2", true)
	createPod(t, cs, "unlabelled", "n1", false)

	ch := make(changes, 10)
	query := url.Values{"fieldSelector": {"spec.nodeName=n1"}, "labelSelector": {managedBy + "=vm-operator"}}
	watchCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		done <- kubeapi.Watch(watchCtx, client, "/api/v1/pods", query, kubeapi.Handler[pod](ch), slog.New(slog.DiscardHandler))
	}()
	next := func(want string) {
		t.Helper()
		select {
		case got := <-ch:
			require.Equal(t, want, got)
		case <-time.After(30 * time.Second):
			t.Fatalf("no %q within 30s", want)
		}
	}
	next("Replace [existing]")
	created := createPod(t, cs, "new", "n1", true)
	next("ADDED new")
	// Neither is watched: the next change is of a watched pod.
	createPod(t, cs, "new-other-node", "n2", true)
	createPod(t, cs, "new-unlabelled", "n1", false)
	p, err := cs.CoreV1().Pods("default").Get(ctx, "existing", metav1.GetOptions{})
	require.NoError(t, err)
	delete(p.Labels, managedBy)
	_, err = cs.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
	next("DELETED existing")
	// No kubelet: only a deletion without grace removes a bound pod. It
	// sets the deletionTimestamp first.
	require.NoError(t, cs.CoreV1().Pods("default").Delete(ctx, "new", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	next("MODIFIED new")
	next("DELETED new")
	cancel()
	require.NoError(t, <-done)

	now := time.Now().UTC()
	event := map[string]any{
		"apiVersion": "events.k8s.io/v1",
		"kind":       "Event",
		"metadata":   map[string]any{"generateName": "new-", "namespace": "default"},
		"eventTime":  now.Format("2006-01-02T15:04:05.000000Z07:00"),
		// The agent's fields.
		"reportingController": "vm-node",
		"reportingInstance":   "vm-node-n1",
		"action":              "Prepare",
		"reason":              "DeviceMissing",
		"note":                "/dev/kvm is missing",
		"type":                "Warning",
		"regarding": map[string]any{
			"kind": "Pod", "apiVersion": "v1", "namespace": "default", "name": created.Name, "uid": string(created.UID),
		},
	}
	require.NoError(t, client.Create(ctx, "/apis/events.k8s.io/v1/namespaces/default/events", event, nil))
	// The API server's own controllers may report in default too (a
	// ClusterIP repaired at its start): only the test's event counts.
	events, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reportingController=vm-node"})
	require.NoError(t, err)
	require.Len(t, events.Items, 1)
	e := events.Items[0]
	assert.Equal(t, "vm-node", e.ReportingController)
	assert.Equal(t, "/dev/kvm is missing", e.Note)
	assert.Equal(t, created.UID, e.Regarding.UID)
	assert.Equal(t, now.Truncate(time.Microsecond), e.EventTime.UTC())

	// A refusal says why.
	delete(event, "reason")
	err = client.Create(ctx, "/apis/events.k8s.io/v1/namespaces/default/events", event, nil)
	var st *kubeapi.StatusError
	require.ErrorAs(t, err, &st)
	assert.Equal(t, 422, st.Code)
	assert.Equal(t, "Invalid", st.Reason)
	assert.Contains(t, err.Error(), "reason")
}

func createPod(t *testing.T, cs kubernetes.Interface, name, node string, managed bool) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/c"}},
		},
	}
	if managed {
		p.Labels[managedBy] = "vm-operator"
	}
	p, err := cs.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{})
	require.NoError(t, err)
	return p
}
