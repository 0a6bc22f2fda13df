package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/testnode"
)

// TestExamples follows "A single node with local disks" of
// docs/user-guide/disks.md as a new user would: the storage of
// examples/single-node, the operator, and VM-Operator's local-path example
// VM, until it runs.
func TestExamples(t *testing.T) {
	const ns, vm = "vmop-demo", "test-vm"
	root, err := testcluster.ModuleRoot()
	require.NoError(t, err)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "examples", name))
		require.NoError(t, err)
		return string(b)
	}
	// What that page has the user do by hand: a loop device for the
	// disk, two directories, the node's name.
	dev, err := node.LoopDevice(testnode.Volume{Name: "test-vm-system", Size: resource.MustParse("40Gi")})
	require.NoError(t, err)
	runnerData, images := node.VolumePath("example-runner-data"), node.VolumePath("example-images")
	for _, d := range []string{runnerData, images} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	storage := strings.NewReplacer(
		"NODE", testnode.Name,
		"/dev/loop0", dev,
		"/var/lib/vmop/runner-data/test-vm", runnerData,
		"/var/lib/vmop/images", images,
	).Replace(read("single-node/storage.yaml"))
	kubectl(t, storage, "apply", "-f", "-")
	installVmop(t)
	kubectl(t, read("local-path-test-vm.yaml"), "apply", "-f", "-")

	// The example asks for 4 CPUs: its pod requests 2, which a node with 2
	// cores and the operator on it cannot give. The status says so, and
	// that page's way out (spec.resources, then a restart) works.
	var unschedulable bool
	eventually.Within(t, 3*time.Minute, func() string {
		for _, c := range vmStatus(t, ns, vm).Conditions {
			switch {
			case c.Type == v1.ConditionRunning && c.Status == metav1.ConditionTrue:
				return ""
			// Other reasons pass: the claim without a class binds
			// (immediately, but not before the scheduler's first try).
			case c.Type == v1.ConditionFailed && c.Status == metav1.ConditionTrue && c.Reason == v1.ReasonUnschedulable &&
				strings.Contains(c.Message, "Insufficient cpu"):
				unschedulable = true
				return ""
			}
		}
		return fmt.Sprintf("%s neither runs nor says why: %+v", vm, vmStatus(t, ns, vm).Conditions)
	})
	if unschedulable {
		t.Log("the node has no 2 CPUs free: giving the example smaller requests")
		kubectl(t, "", "patch", "vm", "-n", ns, vm, "--type", "merge", "-p",
			`{"spec":{"resources":{"requests":{"cpu":"500m","memory":"1Gi"}}}}`)
		kubectl(t, "", "vm", "restart", "-n", ns, vm, "--wait", "--timeout", "3m")
	}
	eventually.Within(t, 2*time.Minute, func() string {
		s := vmStatus(t, ns, vm)
		if s.CPUs == 2 && s.Node == testnode.Name {
			return ""
		}
		return fmt.Sprintf("status: cpus %d, node %q, conditions %+v", s.CPUs, s.Node, s.Conditions)
	})
	require.Contains(t, kubectl(t, "", "vm", "status", "-n", ns, vm), "Running")
	claims, err := node.Client.CoreV1().PersistentVolumeClaims(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	volumes := map[string]string{}
	for _, c := range claims.Items {
		require.Equal(t, corev1.ClaimBound, c.Status.Phase, "claim %s", c.Name)
		volumes[c.Name] = c.Spec.VolumeName
	}
	require.Equal(t, map[string]string{
		"system-disk-test-vm-0": "test-vm-system",
		"runner-data-test-vm-0": "test-vm-runner-data",
		"vmop-image-repository": "vmop-demo-images",
	}, volumes)
	// Its disk has no OS to answer the power button: without a shorter
	// grace period the stop would take the default powerdownTimeout (15
	// minutes), as it should.
	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--grace-period", "2", "--wait", "--timeout", "1m")
	deleteVM(t, ns, vm)
}
