package uninstall_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// agentDeleted is what uninstall --node-agent-only says before the
// namespace.
const agentDeleted = "daemonset.apps/vm-node deleted\n" +
	"clusterrolebinding.rbac.authorization.k8s.io/vm-node deleted\n" +
	"clusterrole.rbac.authorization.k8s.io/vm-node deleted\n" +
	"serviceaccount/vm-node deleted\n" +
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-node-devices deleted\n" +
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-node-devices deleted\n"

var (
	vmGVR  = schema.GroupVersionResource{Group: "vmoperator.jdrupes.org", Version: "v1", Resource: "vms"}
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// TestUninstallOnAPIServer installs into a real kube-apiserver and
// uninstalls, first keeping the CRD, then in another namespace with it.
// VM disks stay either way.
func TestUninstallOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	kubectl := []string{"--kubeconfig", c.Kubeconfig, "--cache-dir", t.TempDir()}
	cs, err := kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))

	r := run(t, append(kubectl, "install")...)
	require.NoError(t, r.Err)

	// The node agent alone goes; its namespace stays, the operator is in it.
	r = run(t, append(kubectl, "uninstall", "--node-agent-only")...)
	require.NoError(t, r.Err)
	require.Equal(t, agentDeleted+"namespace/vmop-system kept: it holds deployment.apps/vm-operator\n", r.Stdout)
	_, err = cs.AppsV1().Deployments("vmop-system").Get(ctx, "vm-operator", metav1.GetOptions{})
	require.NoError(t, err, "the operator stays")
	r = run(t, append(kubectl, "install")...)
	require.NoError(t, r.Err)

	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vms"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	createPVC(t, cs, "vms")
	_, err = dyn.Resource(vmGVR).Namespace("vms").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "vmoperator.jdrupes.org/v1",
		"kind":       "VirtualMachine",
		"metadata":   map[string]any{"name": "vm-a"},
		"spec":       map[string]any{"vm": map[string]any{}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)

	objs, err := install.Objects(install.Options{})
	require.NoError(t, err)
	var deleted, notFound strings.Builder
	for i := len(objs) - 1; i > 0; i-- { // the CRD, first, stays
		fmt.Fprintf(&deleted, "%s deleted\n", ref(objs[i]))
		fmt.Fprintf(&notFound, "%s not found\n", ref(objs[i]))
	}
	r = run(t, append(kubectl, "uninstall")...)
	require.NoError(t, r.Err)
	require.Equal(t, deleted.String(), r.Stdout)
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err)
		got, err := dyn.Resource(m.Resource).Namespace(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
		switch o.GetKind() {
		case "CustomResourceDefinition":
			require.NoError(t, err, "the CRD stays")
		case "Namespace":
			// No namespace controller runs here to finish the deletion.
			require.NoError(t, err)
			require.NotNil(t, got.GetDeletionTimestamp(), "the namespace is being deleted")
		default:
			require.True(t, apierrors.IsNotFound(err), "%s: %v", ref(o), err)
		}
	}
	_, err = dyn.Resource(vmGVR).Namespace("vms").Get(ctx, "vm-a", metav1.GetOptions{})
	require.NoError(t, err, "the VM stays with the CRD")

	// Again: what is gone is reported as not found. The namespace still
	// waits for a namespace controller, and deleting it again is no error.
	r = run(t, append(kubectl, "uninstall")...)
	require.NoError(t, r.Err)
	require.Equal(t, strings.Replace(notFound.String(), "namespace/vmop-system not found", "namespace/vmop-system deleted", 1), r.Stdout)

	// Installing into it before it is gone says why that fails.
	r = run(t, append(kubectl, "install")...)
	require.ErrorContains(t, r.Err, "apply serviceaccount/vm-operator: ")
	require.ErrorContains(t, r.Err, "because it is being terminated")
	require.NotContains(t, r.Err.Error(), "rights")

	// With the CRD, from a namespace that holds a VM disk itself.
	r = run(t, append(kubectl, "install", "-n", "vmop")...)
	require.NoError(t, r.Err)
	createPVC(t, cs, "vmop")
	r = run(t, append(kubectl, "uninstall", "-n", "vmop", "--delete-crd", "--yes")...)
	require.NoError(t, r.Err)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	require.Equal(t, "namespace/vmop kept: it holds PersistentVolumeClaims", lines[len(lines)-2])
	require.Equal(t, "customresourcedefinition.apiextensions.k8s.io/vms.vmoperator.jdrupes.org deleted", lines[len(lines)-1])
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "vmop", metav1.GetOptions{})
	require.NoError(t, err)
	require.Nil(t, ns.DeletionTimestamp)
	// The API server removes the CRD once it has deleted every VM.
	require.Eventually(t, func() bool {
		_, err := dyn.Resource(crdGVR).Get(ctx, "vms.vmoperator.jdrupes.org", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 30*time.Second, 100*time.Millisecond, "the CRD goes")

	for _, ns := range []string{"vms", "vmop"} {
		_, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "disk-vm-a-0", metav1.GetOptions{})
		require.NoError(t, err, "the VM disk in %s stays", ns)
	}

	// The node agent installed alone goes with its namespace.
	r = run(t, append(kubectl, "install", "--node-agent-only", "-n", "vmop-agent")...)
	require.NoError(t, r.Err)
	r = run(t, append(kubectl, "uninstall", "--node-agent-only", "-n", "vmop-agent")...)
	require.NoError(t, r.Err)
	require.Equal(t, agentDeleted+"namespace/vmop-agent deleted\n", r.Stdout)
}

// createPVC creates a VM disk as a StatefulSet would.
func createPVC(t *testing.T, cs kubernetes.Interface, namespace string) {
	t.Helper()
	_, err := cs.CoreV1().PersistentVolumeClaims(namespace).Create(t.Context(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "disk-vm-a-0"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// ref is how kubectl names an object.
func ref(o *unstructured.Unstructured) string {
	gvk := o.GroupVersionKind()
	kind := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		kind += "." + gvk.Group
	}
	return kind + "/" + o.GetName()
}
