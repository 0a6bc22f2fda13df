package install_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/vmop/vmop/test/harness/testcluster"
)

var applied = []string{
	"customresourcedefinition.apiextensions.k8s.io/vms.vmoperator.jdrupes.org",
	"namespace/vmop-system",
	"serviceaccount/vm-operator",
	"clusterrole.rbac.authorization.k8s.io/vm-operator",
	"clusterrolebinding.rbac.authorization.k8s.io/vm-operator",
	"role.rbac.authorization.k8s.io/vm-operator-leader-election",
	"rolebinding.rbac.authorization.k8s.io/vm-operator-leader-election",
	"clusterrole.rbac.authorization.k8s.io/vm-runner",
	"clusterrole.rbac.authorization.k8s.io/vm-user",
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-user",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-user",
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-runner-own-vm",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-runner-own-vm",
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-node-devices",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-node-devices",
	"serviceaccount/vm-node",
	"clusterrole.rbac.authorization.k8s.io/vm-node",
	"clusterrolebinding.rbac.authorization.k8s.io/vm-node",
	"daemonset.apps/vm-node",
	"deployment.apps/vm-operator",
}

// TestInstallOnAPIServer installs into a real kube-apiserver, twice.
func TestInstallOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	kubectl := []string{"--kubeconfig", c.Kubeconfig, "--cache-dir", t.TempDir()}
	var want strings.Builder
	for _, ref := range applied {
		fmt.Fprintf(&want, "%s serverside-applied\n", ref)
	}

	// Someone without rights learns which object was refused and why.
	r := run(t, append(kubectl, "--as", "someone", "install")...)
	require.Error(t, r.Err)
	require.Regexp(t, `^get namespace/vmop-system: .*forbidden: User "someone" cannot get resource "namespaces" .*: this needs cluster-admin-like rights`, r.Err.Error())

	for range 2 { // the second run changes nothing and succeeds as well
		r := run(t, append(kubectl, "install", "--image", testImage)...)
		require.NoError(t, r.Err, r.Stderr)
		require.Equal(t, want.String(), r.Stdout)
	}

	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, obj := range docs(t, run(t, "install", "--dry-run", "--image", testImage).Stdout) {
		u := unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err)
		got, err := dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Get(ctx, u.GetName(), metav1.GetOptions{})
		require.NoError(t, err, "%s %s", u.GetKind(), u.GetName())
		require.True(t, slices.ContainsFunc(got.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool {
			return f.Manager == "kubectl-vm" && f.Operation == metav1.ManagedFieldsOperationApply
		}), "%s %s is applied by kubectl-vm", u.GetKind(), u.GetName())
		if u.GetKind() == "CustomResourceDefinition" {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			require.True(t, slices.ContainsFunc(conds, func(c any) bool {
				m := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			}), "the CRD is established: %v", conds)
		}
	}

	// No controller manager runs, so the Deployment never becomes
	// available by itself.
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait", "--timeout", "2s")...)
	require.EqualError(t, r.Err, "deployment.apps/vm-operator is not available yet, giving up (see --timeout)")
	require.Equal(t, want.String(), r.Stdout)

	// What the Deployment controller would write once the pod is ready.
	deployments := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace("vmop-system")
	d, err := deployments.Get(ctx, "vm-operator", metav1.GetOptions{})
	require.NoError(t, err)
	status := fmt.Sprintf(`{"status":{"observedGeneration":%d,"replicas":1,"updatedReplicas":1,"readyReplicas":1,"availableReplicas":1}}`, d.GetGeneration())
	_, err = deployments.Patch(ctx, "vm-operator", types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status")
	require.NoError(t, err)

	// Then the node agent: not counted by a DaemonSet controller yet,
	// then ready on one node of two, then on both.
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait", "--timeout", "2s")...)
	require.EqualError(t, r.Err, "daemonset.apps/vm-node is not ready yet (the DaemonSet controller has not counted its nodes), giving up (see --timeout)")
	require.Equal(t, want.String()+"deployment.apps/vm-operator available\n", r.Stdout)
	daemonSets := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}).Namespace("vmop-system")
	ds, err := daemonSets.Get(ctx, "vm-node", metav1.GetOptions{})
	require.NoError(t, err)
	dsStatus := func(available int) []byte {
		return fmt.Appendf(nil, `{"status":{"observedGeneration":%d,"desiredNumberScheduled":2,"currentNumberScheduled":2,"numberMisscheduled":0,`+
			`"updatedNumberScheduled":2,"numberReady":%[2]d,"numberAvailable":%[2]d}}`, ds.GetGeneration(), available)
	}
	_, err = daemonSets.Patch(ctx, "vm-node", types.MergePatchType, dsStatus(1), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait", "--timeout", "2s")...)
	require.EqualError(t, r.Err, "daemonset.apps/vm-node is not ready on every node yet (1 of 2 nodes not ready), giving up (see --timeout)")
	_, err = daemonSets.Patch(ctx, "vm-node", types.MergePatchType, dsStatus(2), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait")...)
	require.NoError(t, r.Err)
	require.Equal(t, want.String()+"deployment.apps/vm-operator available\ndaemonset.apps/vm-node ready on 2 nodes\n", r.Stdout)

	// The node agent alone waits for the DaemonSet alone.
	r = run(t, append(kubectl, "install", "--node-agent-only", "--wait")...)
	require.NoError(t, r.Err)
	require.Equal(t, "namespace/vmop-system serverside-applied\n"+
		"validatingadmissionpolicy.admissionregistration.k8s.io/vm-node-devices serverside-applied\n"+
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-node-devices serverside-applied\n"+
		"serviceaccount/vm-node serverside-applied\n"+
		"clusterrole.rbac.authorization.k8s.io/vm-node serverside-applied\n"+
		"clusterrolebinding.rbac.authorization.k8s.io/vm-node serverside-applied\n"+
		"daemonset.apps/vm-node serverside-applied\n"+
		"daemonset.apps/vm-node ready on 2 nodes\n", r.Stdout)
}
