package testcluster_test

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// widgetCRD stands for vmop's CRD: a custom resource that owns objects.
const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object}
`

// TestStatefulSetRunsAndIsCollected checks the parts a VM's workload relies
// on: the StatefulSet controller makes a pod and a claim, kwok runs the pod
// on the node the test named, and a background delete of the StatefulSet
// takes the pod (garbage collector) but keeps the claim. A foreground delete
// of a custom resource takes what it owns at once, as its CRD was installed
// before the controllers started. Stop then leaves no process behind.
func TestStatefulSetRunsAndIsCollected(t *testing.T) {
	start := time.Now()
	c := testcluster.NewWithOptions(t, testcluster.Options{
		CRDs:        [][]byte{[]byte(widgetCRD)},
		Controllers: true,
		Nodes:       []string{"node-1"},
	})
	t.Logf("cluster with controller manager and kwok ready in %v", time.Since(start).Round(time.Millisecond))
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "sts"
	if err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{"app": "web"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: new(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeName: "node-1", // no scheduler
					Containers: []corev1.Container{{
						Name:         "web",
						Image:        "web:never-pulled", // kwok runs nothing
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("1Gi"),
					}},
				},
			}},
		},
	}
	applied := time.Now()
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create StatefulSet: %v", err)
	}

	pods := cs.CoreV1().Pods(ns)
	eventually.Succeeds(t, time.Minute, func() error { // pod web-0 Running and Ready
		pod, err := pods.Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning || !podReady(pod) {
			return fmt.Errorf("phase %s, conditions %v", pod.Status.Phase, pod.Status.Conditions)
		}
		return nil
	})
	t.Logf("pod Running and Ready %v after the StatefulSet was created", time.Since(applied).Round(time.Millisecond))
	claims := cs.CoreV1().PersistentVolumeClaims(ns)
	if _, err := claims.Get(ctx, "data-web-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("claim of web-0: %v", err)
	}

	background := metav1.DeletePropagationBackground
	if err := cs.AppsV1().StatefulSets(ns).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatalf("delete StatefulSet: %v", err)
	}
	eventually.Succeeds(t, time.Minute, func() error { // pod web-0 gone
		pod, err := pods.Get(ctx, "web-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there (deletionTimestamp %v)", pod.DeletionTimestamp)
	})
	// The default retention policy keeps claims: they hold the VM's disks.
	claim, err := claims.Get(ctx, "data-web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("claim after the StatefulSet was deleted: %v", err)
	}
	if claim.DeletionTimestamp != nil {
		t.Errorf("claim is being deleted along with the StatefulSet")
	}

	// Well below the 30 s after which the garbage collector would have
	// discovered the CRD by itself.
	widgets := dynamic.NewForConfigOrDie(c.Config).Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace(ns)
	widget, err := widgets.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Widget: %v", err)
	}
	owned := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: widget.GetUID(), BlockOwnerDeletion: new(true),
	}}}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, owned, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create owned ConfigMap: %v", err)
	}
	foreground := metav1.DeletePropagationForeground
	if err := widgets.Delete(ctx, "w", metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatalf("delete Widget: %v", err)
	}
	eventually.Succeeds(t, 15*time.Second, func() error { // Widget and its ConfigMap gone
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "owned", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ConfigMap: %v", err)
		}
		if _, err := widgets.Get(ctx, "w", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Widget: %v", err)
		}
		return nil
	})

	procs := c.Processes()
	if len(procs) != 4 {
		t.Errorf("processes = %d, want etcd, kube-apiserver, kube-controller-manager and kwok", len(procs))
	}
	c.Stop()
	for _, p := range procs {
		// The negative pid asks for the whole process group.
		if err := syscall.Kill(-p.Pid(), 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d): process group still there after Stop (kill: %v)", p.Name, p.Pid(), err)
		}
	}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
