package expose_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/vmtest"
)

// TestOnAPIServer exposes a VirtualMachine on a real kube-apiserver with
// the CRD: the Service, owned by the VM; a missing VM and a Service that
// exists are errors; a server dry run stores nothing; the rights to get
// VMs and StatefulSets and to create Services are all the command needs.
// test/e2e runs it in both modes as a vm-user, with the controllers and a
// pod.
func TestOnAPIServer(t *testing.T) {
	const ns = "vms"
	c := vmtest.NewCluster(t, ns)
	ctx := t.Context()
	vm := c.CreateVM(t, ns, "web", map[string]any{"networks": []any{map[string]any{"user": map[string]any{}}}})
	services := c.Client().CoreV1().Services(ns)
	with := func(args ...string) []string {
		return append([]string{"--kubeconfig", c.Kubeconfig, "-n", ns}, args...)
	}

	t.Run("expose", func(t *testing.T) {
		r := run(t, with("expose", "web", "--port", "22", "--port", "8080:80", "--type", "NodePort")...)
		require.NoError(t, r.Err, r.Stderr)
		require.Equal(t, "service/web-22 created\n", r.Stdout)
		require.Equal(t, "warning: vms/web: the guest is not on the pod network (its networks: user): the Service reaches nothing of the guest\n", r.Stderr)

		svc, err := services.Get(ctx, "web-22", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, render.SelectorLabels("web"), svc.Spec.Selector)
		require.Equal(t, render.Labels("web"), svc.Labels)
		require.Len(t, svc.Spec.Ports, 2)
		require.NotZero(t, svc.Spec.Ports[1].NodePort, "the API server gave it a node port")
		require.Equal(t, []metav1.OwnerReference{{APIVersion: v1.APIVersion, Kind: v1.Kind, Name: "web", UID: vm.GetUID()}}, svc.OwnerReferences,
			"owned by the VM, not controlled: the garbage collector deletes it with the VM")
		require.Equal(t, vmclient.FieldManager, svc.ManagedFields[0].Manager)

		r = run(t, with("expose", "web", "--port", "22:2222")...)
		require.EqualError(t, r.Err, `service "web-22" already exists in namespace "vms": nothing changed (choose another name with --name)`)
		again, err := services.Get(ctx, "web-22", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, svc.ResourceVersion, again.ResourceVersion)
	})

	t.Run("missing VM", func(t *testing.T) {
		r := run(t, with("expose", "nosuch", "--port", "22")...)
		require.Error(t, r.Err)
		golden.Assert(t, filepath.Join("testdata", "errors", "missing-vm.txt"), []byte(r.Err.Error()+"\n"))
		_, err := services.Get(ctx, "nosuch-22", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "no Service: %v", err)
	})

	t.Run("server dry run", func(t *testing.T) {
		r := run(t, with("expose", "web", "--port", "443", "--dry-run=server")...)
		require.NoError(t, r.Err)
		require.Equal(t, "service/web-443 created (server dry run)\n", r.Stdout)
		r = run(t, with("expose", "web", "--port", "443", "--dry-run=server", "-o", "yaml")...)
		require.NoError(t, r.Err)
		svc := decodeService(t, r.Stdout)
		require.Equal(t, ns, svc.Namespace)
		require.NotEmpty(t, svc.Spec.ClusterIP, "the server's object")
		require.Empty(t, svc.ManagedFields)
		_, err := services.Get(ctx, "web-443", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "nothing stored: %v", err)
	})

	t.Run("rights", func(t *testing.T) {
		kube := c.Client()
		rules := []rbacv1.PolicyRule{
			{APIGroups: []string{v1.Group}, Resources: []string{v1.Resource}, Verbs: []string{"get"}},
			{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"create"}},
		}
		_, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "exposer"}, Rules: rules}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "exposer"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "exposer"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "exposer"}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, testcluster.WaitAllowed(ctx, kube, "exposer", ns, rules...))

		r := run(t, with("--as", "exposer", "expose", "web", "--port", "80")...)
		require.NoError(t, r.Err, r.Stderr)
		_, err = services.Get(ctx, "web-80", metav1.GetOptions{})
		require.NoError(t, err)

		r = run(t, with("--as", "nobody", "expose", "web", "--port", "81")...)
		require.ErrorContains(t, r.Err, `User "nobody" cannot get resource "vms"`)
		require.ErrorContains(t, r.Err, "ask a cluster administrator")
	})
}
