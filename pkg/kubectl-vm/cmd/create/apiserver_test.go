package create_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/vmtest"
)

// TestOnAPIServer creates VMs on a real kube-apiserver with the CRD: what
// is stored is what -o yaml prints, a second create changes nothing, dry
// runs store nothing, bad input sends nothing, and the right to create
// VirtualMachines is all the command needs.
func TestOnAPIServer(t *testing.T) {
	const ns = "vms"
	c := vmtest.NewCluster(t, ns)
	ctx := t.Context()
	vms := c.VMs.Namespace(ns)
	kc := []string{"--kubeconfig", c.Kubeconfig, "-n", ns}
	with := func(args ...string) []string { return append(append([]string{}, kc...), args...) }
	flags := []string{"--cpus", "2", "--ram", "2Gi", "--disk", "10Gi,fast", "--cdrom", "installer.iso", "--ssh-key", sshKey, "--running"}
	notFound := func(t *testing.T, name string) {
		t.Helper()
		_, err := vms.Get(ctx, name, metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "%s was created: %v", name, err)
	}

	t.Run("create", func(t *testing.T) {
		r := run(t, with(append([]string{"create", "web"}, flags...)...)...)
		require.NoError(t, r.Err, r.Stderr)
		require.Equal(t, "virtualmachine.vmoperator.jdrupes.org/web created\n", r.Stdout)
		require.Empty(t, r.Stderr)

		obj, err := vms.Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		b, err := obj.MarshalJSON()
		require.NoError(t, err)
		stored, err := v1.DecodeJSON(b)
		require.NoError(t, err, "the stored VM decodes strictly")
		printed := decodeOne(t, run(t, with(append([]string{"create", "web", "-o", "yaml"}, flags...)...)...).Stdout)
		require.Equal(t, printed.Spec, stored.Spec, "the cluster stores what -o yaml prints")
		require.Equal(t, ns, stored.Namespace)
		require.Equal(t, vmclient.FieldManager, obj.GetManagedFields()[0].Manager)

		// A second create, even with other flags, changes nothing.
		r = run(t, with("create", "web", "--cpus", "4")...)
		require.EqualError(t, r.Err, `virtual machine "web" already exists in namespace "vms": nothing changed (change it with kubectl vm set, kubectl edit or kubectl apply)`)
		require.Empty(t, r.Stdout)
		again, err := vms.Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, obj.GetResourceVersion(), again.GetResourceVersion())
	})

	t.Run("kubeconfig namespace", func(t *testing.T) {
		r := run(t, "--kubeconfig", c.Kubeconfig, "create", "elsewhere")
		require.NoError(t, r.Err)
		_, err := c.VMs.Namespace("default").Get(ctx, "elsewhere", metav1.GetOptions{})
		require.NoError(t, err, "without -n, the kubeconfig's namespace")
	})

	t.Run("server dry run", func(t *testing.T) {
		r := run(t, with("create", "dry", "--ram", "1Gi", "--dry-run=server")...)
		require.NoError(t, r.Err)
		require.Equal(t, "virtualmachine.vmoperator.jdrupes.org/dry created (server dry run)\n", r.Stdout)
		notFound(t, "dry")

		r = run(t, with("create", "dry", "--ram", "1Gi", "--dry-run=server", "-o", "yaml")...)
		require.NoError(t, r.Err)
		require.Contains(t, r.Stdout, "\n  namespace: vms\n", "the server's object")
		require.Contains(t, r.Stdout, "\n  uid: ")
		require.NotContains(t, r.Stdout, "managedFields")
		require.Equal(t, v1.Quantity("1Gi"), decodeOne(t, r.Stdout).Spec.VM.CurrentRAM)
		notFound(t, "dry")

		r = run(t, with("create", "web", "--dry-run=server")...)
		require.ErrorContains(t, r.Err, `virtual machine "web" already exists`)
	})

	t.Run("client output sends nothing", func(t *testing.T) {
		for _, args := range [][]string{{"-o", "yaml"}, {"--dry-run=client"}, {"--dry-run=client", "-o", "json"}} {
			r := run(t, with(append([]string{"create", "printed"}, args...)...)...)
			require.NoError(t, r.Err)
			notFound(t, "printed")
		}
	})

	t.Run("bad input creates nothing", func(t *testing.T) {
		for name, tc := range badInput(t) {
			if name == "output" || name == "dry run" || name == "name" {
				continue // nothing to create with these
			}
			r := run(t, with(append([]string{"create", "bad"}, tc.args...)...)...)
			require.Error(t, r.Err, name)
			requireNamesFlag(t, r.Err)
			notFound(t, "bad")
		}
	})

	t.Run("rights", func(t *testing.T) {
		// Only create on vms: the command needs no get, patch or list.
		kube := c.Client()
		rules := []rbacv1.PolicyRule{{APIGroups: []string{v1.Group}, Resources: []string{v1.Resource}, Verbs: []string{"create"}}}
		_, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "vm-creator"}, Rules: rules}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "vm-creator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "vm-creator"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "creator"}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, testcluster.WaitAllowed(ctx, kube, "creator", ns, rules...))

		r := run(t, with("--as", "creator", "create", "by-creator", "--ram", "1Gi")...)
		require.NoError(t, r.Err)
		_, err = vms.Get(ctx, "by-creator", metav1.GetOptions{})
		require.NoError(t, err)
		r = run(t, with("--as", "creator", "create", "by-creator")...)
		require.ErrorContains(t, r.Err, "already exists", "a clear error without the right to get")

		r = run(t, with("--as", "nobody", "create", "by-nobody")...)
		require.ErrorContains(t, r.Err, `User "nobody" cannot create resource "vms"`)
		require.ErrorContains(t, r.Err, "ask a cluster administrator")
		notFound(t, "by-nobody")
	})

	t.Run("storage class completion", func(t *testing.T) {
		for _, name := range []string{"fast", "slow"} {
			_, err := c.Client().StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
				ObjectMeta:  metav1.ObjectMeta{Name: name},
				Provisioner: "example.org/none",
			}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		complete := func(value string) []string {
			r := run(t, with("__complete", "create", "x", "--disk", value)...)
			require.NoError(t, r.Err)
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			return lines[:len(lines)-1] // the last is cobra's directive
		}
		require.Equal(t, []string{"40Gi,fast", "40Gi,slow"}, complete("40Gi,"))
		require.Equal(t, []string{"40Gi,slow"}, complete("40Gi,s"))
		require.Empty(t, complete("40"), "no sizes to offer")
	})
}
