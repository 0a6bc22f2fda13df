package vmtest

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// Cluster is a bare API server for a package's tests against it: vmop's
// CRD installed, the namespaces asked for, and clients; no controller, no
// node. Env is the fuller cluster of the plugin's read commands.
type Cluster struct {
	*testcluster.Cluster
	Dyn dynamic.Interface
	// VMs are the VirtualMachines of all namespaces.
	VMs dynamic.NamespaceableResourceInterface
}

// NewCluster starts the API server (stopped when t ends) and creates the
// namespaces.
func NewCluster(t testing.TB, namespaces ...string) *Cluster {
	t.Helper()
	c := testcluster.New(t)
	ctx := t.Context()
	require.NoError(t, c.InstallCRD(ctx, v1.CRDManifest))
	for _, ns := range namespaces {
		require.NoError(t, c.CreateNamespace(ctx, ns))
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	return &Cluster{Cluster: c, Dyn: dyn, VMs: dyn.Resource(v1.GroupVersionResource)}
}

// CreateVM creates VM ns/name whose spec.vm is vm.
func (c *Cluster) CreateVM(t testing.TB, ns, name string, vm map[string]any) *unstructured.Unstructured {
	t.Helper()
	u, err := c.VMs.Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.APIVersion,
		"kind":       v1.Kind,
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"vm": vm},
	}}, metav1.CreateOptions{})
	require.NoError(t, err, "create VM %s/%s", ns, name)
	return u
}
