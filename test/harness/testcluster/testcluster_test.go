package testcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vmop/vmop/test/harness/testcluster"
)

func TestClusterStartsAndServesKubectl(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()

	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "testcluster-ns"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	out, err := c.Kubectl(ctx, "get", "ns").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get ns: %v\n%s", err, out)
	}
	for _, want := range []string{"NAME", "default", "kube-system", "testcluster-ns"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl get ns output lacks %q:\n%s", want, out)
		}
	}
}

func TestClusterStopEndsProcesses(t *testing.T) {
	c := testcluster.New(t)
	procs := c.Processes()
	if len(procs) != 2 {
		t.Fatalf("processes = %d, want etcd and kube-apiserver", len(procs))
	}
	c.Stop()
	for _, p := range procs {
		select {
		case <-p.Done():
		default:
			t.Errorf("%s still runs after Stop", p.Name)
		}
	}
	c.Stop() // a second Stop, as t.Cleanup does, is harmless
}

func TestClusterAwayAndBack(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Away(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cs.CoreV1().Namespaces().Get(short, "default", metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Error("the API server answered while away")
	}
	if err := c.Back(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("after Back: %v", err)
	}
}
