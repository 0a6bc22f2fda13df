package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/podsync"
)

// syncPodController has the pod of VM "vm" in its cache and in the fake
// API server; VM "stopped" has none.
func syncPodController(t *testing.T) (*Controller, *fake.Clientset) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vm-0", Namespace: "ns"}}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(t, pods.Add(pod))
	kube := fake.NewClientset(pod)
	return &Controller{
		kube:    kube,
		metrics: NewMetrics(nil),
		scopes:  map[string]*scope{"": {pods: corelisters.NewPodLister(pods)}},
	}, kube
}

// testVM is a VM as reconcile has it: decoded from the informer's object.
func testVM(t *testing.T, name string) *v1.VirtualMachine {
	t.Helper()
	vm, err := decodeVM(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.Kind,
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": "uid-" + name},
		"spec":     map[string]any{"vm": map[string]any{"state": "Running"}},
	}})
	require.NoError(t, err)
	return vm
}

func TestSyncPod(t *testing.T) {
	ctx := t.Context()

	t.Run("annotates the pod with the version written", func(t *testing.T) {
		c, kube := syncPodController(t)
		c.events = events.NewFakeRecorder(1)
		c.syncPod(ctx, testVM(t, "vm"), "17")
		pod, err := kube.CoreV1().Pods("ns").Get(ctx, "vm-0", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "17", pod.Annotations[podsync.AnnotationConfigVersion])
	})

	t.Run("nothing written, or no pod: no request", func(t *testing.T) {
		c, kube := syncPodController(t)
		c.events = events.NewFakeRecorder(1)
		c.syncPod(ctx, testVM(t, "vm"), "")
		c.syncPod(ctx, testVM(t, "stopped"), "18")
		require.Empty(t, kube.Actions())
	})

	t.Run("a failure is a Warning event on the VM, not an error", func(t *testing.T) {
		c, kube := syncPodController(t)
		kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "vm-0", nil)
		})
		// A real recorder, to see the event as the API server gets it.
		b := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
		require.NoError(t, b.StartRecordingToSinkWithContext(ctx))
		t.Cleanup(b.Shutdown)
		c.events = b.NewRecorder(scheme.Scheme, EventController)

		c.syncPod(ctx, testVM(t, "vm"), "19")
		assert.EventuallyWithT(t, func(ct *assert.CollectT) {
			list, err := kube.EventsV1().Events("ns").List(ctx, metav1.ListOptions{})
			require.NoError(ct, err)
			require.Len(ct, list.Items, 1)
			e := list.Items[0]
			assert.Equal(ct, corev1.EventTypeWarning, e.Type)
			assert.Equal(ct, EventPodSyncFailed, e.Reason)
			assert.Equal(ct, EventController, e.ReportingController)
			assert.Equal(ct, corev1.ObjectReference{APIVersion: v1.APIVersion, Kind: v1.Kind, Namespace: "ns", Name: "vm", UID: "uid-vm"}, e.Regarding)
			assert.Equal(ct, "vm-0", e.Related.Name)
			assert.Contains(ct, e.Note, "may take a minute to reach the runner")
			assert.Contains(ct, e.Note, "forbidden")
		}, 5*time.Second, 20*time.Millisecond)
	})
}
