package vmclient_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/vmtest"
)

// The cluster of vmtest has VMs in both modes; see there.

func newClient(t *testing.T, e *vmtest.Env, ns string) *vmclient.Client {
	t.Helper()
	c, err := vmclient.New(e.ConfigFlags(ns))
	require.NoError(t, err)
	return c
}

func TestClient(t *testing.T) {
	e := vmtest.New(t)
	c := newClient(t, e, vmtest.Namespace)
	ctx := t.Context()

	t.Run("get operator mode", func(t *testing.T) {
		vm, err := c.Get(ctx, vmtest.Desktop)
		require.NoError(t, err)
		require.Equal(t, vmclient.ModeOperator, vm.Mode)
		require.Equal(t, vmtest.Desktop, vm.Object.GetName())
		require.Equal(t, int32(3), *vm.VM.Spec.VM.CurrentCPUs)
		require.Equal(t, int32(2), vm.VM.Status.CPUs)
		require.NotNil(t, vm.StatefulSet)
		pod, err := c.Pod(ctx, vm)
		require.NoError(t, err)
		require.Equal(t, vmtest.Node, pod.Spec.NodeName)
	})

	t.Run("get GitOps mode", func(t *testing.T) {
		vm, err := c.Get(ctx, vmtest.GitOps)
		require.NoError(t, err)
		require.Equal(t, vmclient.ModeGitOps, vm.Mode)
		require.Nil(t, vm.Object)
		require.Nil(t, vm.VM)
		require.Equal(t, vmtest.GitOps, vm.StatefulSet.Name)

		stopped, err := newClient(t, e, vmtest.OtherNamespace).Get(ctx, vmtest.Server)
		require.NoError(t, err)
		pod, err := c.Pod(ctx, stopped)
		require.NoError(t, err)
		require.Nil(t, pod, "a stopped VM has no pod")
	})

	t.Run("not found", func(t *testing.T) {
		// A StatefulSet that kubectl vm did not render is no VM.
		labels := map[string]string{"app": "plain"}
		_, err := e.Kube.AppsV1().StatefulSets(vmtest.Namespace).Create(ctx, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "plain"},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To[int32](0),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
				},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		for _, name := range []string{"nope", "plain"} {
			_, err := c.Get(ctx, name)
			require.EqualError(t, err, `virtual machine "`+name+`" not found in namespace "vms": no VirtualMachine and no StatefulSet rendered by kubectl vm`)
		}
		vms, err := c.List(ctx, vmclient.ListOptions{})
		require.NoError(t, err)
		for _, vm := range vms {
			require.NotEqual(t, "plain", vm.Name)
		}
	})

	t.Run("list", func(t *testing.T) {
		names := func(vms []*vmclient.VM) []string {
			var out []string
			for _, vm := range vms {
				out = append(out, vm.Namespace+"/"+vm.Name+" "+string(vm.Mode))
			}
			return out
		}
		vms, err := c.List(ctx, vmclient.ListOptions{})
		require.NoError(t, err)
		require.Equal(t, []string{"vms/desktop operator", "vms/gitops gitops", "vms/stopped operator"}, names(vms))
		require.Nil(t, vms[0].StatefulSet, "an operator-mode VM is listed without its StatefulSet")
		require.NotNil(t, vms[1].StatefulSet, "a GitOps-mode VM is its StatefulSet")
		require.Nil(t, vms[0].Object, "unstructured only when asked for")
		vms, err = c.List(ctx, vmclient.ListOptions{Objects: true})
		require.NoError(t, err)
		require.Equal(t, vmtest.Desktop, vms[0].Object.GetName())
		require.Equal(t, vms[0].VM.UID, vms[0].Object.GetUID())
		vms, err = c.List(ctx, vmclient.ListOptions{AllNamespaces: true})
		require.NoError(t, err)
		require.Equal(t, []string{"other/server gitops", "vms/desktop operator", "vms/gitops gitops", "vms/stopped operator"}, names(vms))
	})

	// The printer columns, as the operator's status fills them, stand in
	// for whole VMs; a VM without a printable status yet makes List read
	// whole VMs.
	t.Run("list summaries", func(t *testing.T) {
		vms, err := c.List(ctx, vmclient.ListOptions{Summaries: true})
		require.NoError(t, err)
		require.Len(t, vms, 3)
		require.Equal(t, "vms/desktop", vms[0].Namespace+"/"+vms[0].Name)
		require.Regexp(t, `^[0-9]+s$`, vms[0].Summary.Age, "the API server's clock")
		require.Equal(t, &vmclient.Summary{
			State: "Running", Status: "Running", CPUs: "2", RAM: "4Gi", TargetCPUs: "3", TargetRAM: "4Gi",
			Node: vmtest.Node, Console: "192.0.2.10", Age: vms[0].Summary.Age,
		}, vms[0].Summary)
		require.Nil(t, vms[0].VM, "only the columns are read")
		require.Nil(t, vms[1].Summary, "a GitOps-mode VM is its StatefulSet")
		require.NotNil(t, vms[1].StatefulSet)
		require.Equal(t, &vmclient.Summary{Status: "Stopped", TargetCPUs: "2", TargetRAM: "1Gi",
			Age: vms[2].Summary.Age}, vms[2].Summary)

		// All namespaces: one request each.
		vms, err = c.List(ctx, vmclient.ListOptions{Summaries: true, AllNamespaces: true})
		require.NoError(t, err)
		require.Len(t, vms, 4)
		require.Equal(t, "other/server", vms[0].Namespace+"/"+vms[0].Name)
		require.Nil(t, vms[0].Summary, "GitOps mode")
		require.Equal(t, "vms/stopped", vms[3].Namespace+"/"+vms[3].Name)
		require.Equal(t, "Stopped", vms[3].Summary.Status)

		fresh := newClient(t, e, "fresh")
		require.NoError(t, e.CreateNamespace(ctx, "fresh"))
		vms, err = fresh.List(ctx, vmclient.ListOptions{Summaries: true})
		require.NoError(t, err)
		require.Empty(t, vms)
		vm, err := c.Get(ctx, vmtest.Stopped)
		require.NoError(t, err)
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1.APIVersion, "kind": v1.Kind,
			"metadata": map[string]any{"name": "new", "namespace": "fresh"},
			"spec":     vm.Object.Object["spec"],
		}}
		_, err = e.Dynamic.Resource(v1.GroupVersionResource).Namespace("fresh").Create(ctx, u, metav1.CreateOptions{})
		require.NoError(t, err)
		vms, err = fresh.List(ctx, vmclient.ListOptions{Summaries: true})
		require.NoError(t, err)
		require.Len(t, vms, 1)
		require.Nil(t, vms[0].Summary, "no operator has reported on it")
		require.Equal(t, "new", vms[0].VM.Name)
		vms, err = c.List(ctx, vmclient.ListOptions{Summaries: true, AllNamespaces: true})
		require.NoError(t, err)
		require.Len(t, vms, 5)
		require.Nil(t, vms[0].Summary, "whole VMs in every namespace")
		require.Equal(t, "fresh/new", vms[0].Namespace+"/"+vms[0].Name)
		require.NotNil(t, vms[0].VM)
		require.NoError(t, e.Dynamic.Resource(v1.GroupVersionResource).Namespace("fresh").Delete(ctx, "new", metav1.DeleteOptions{}))
	})

	t.Run("unreachable", func(t *testing.T) {
		flags := e.ConfigFlags(vmtest.Namespace)
		flags.APIServer = ptr.To("https://127.0.0.1:1")
		c, err := vmclient.New(flags)
		require.NoError(t, err)
		_, err = c.Get(ctx, vmtest.Desktop)
		require.EqualError(t, err, `cannot reach the cluster at https://127.0.0.1:1: Get "https://127.0.0.1:1/apis/vmoperator.jdrupes.org/v1/namespaces/vms/vms/desktop": dial tcp 127.0.0.1:1: connect: connection refused`)
	})

	t.Run("forbidden", func(t *testing.T) {
		flags := e.ConfigFlags(vmtest.Namespace)
		flags.Impersonate = ptr.To("nobody")
		c, err := vmclient.New(flags)
		require.NoError(t, err)
		_, err = c.List(ctx, vmclient.ListOptions{})
		require.EqualError(t, err, `vms.vmoperator.jdrupes.org is forbidden: User "nobody" cannot list resource "vms" in API group "vmoperator.jdrupes.org" in the namespace "vms"; ask a cluster administrator for that right`)
	})

	t.Run("update config", func(t *testing.T) {
		c := newClient(t, e, vmtest.OtherNamespace)
		vm, err := c.Get(ctx, vmtest.Server)
		require.NoError(t, err)
		configMaps := e.Kube.CoreV1().ConfigMaps(vmtest.OtherNamespace)
		before, err := configMaps.Get(ctx, vmtest.Server, metav1.GetOptions{})
		require.NoError(t, err)
		file := before.Data[vmpod.ConfigFile]
		require.Contains(t, file, "currentCpus: 8\n")

		var warnings bytes.Buffer
		require.NoError(t, c.UpdateConfig(ctx, vm, &warnings, func(cfg *runnerconfig.Config) error {
			cfg.VM.CurrentCPUs = 4
			return nil
		}))
		require.Empty(t, warnings.String(), "a stopped VM has no pod to annotate")
		after, err := configMaps.Get(ctx, vmtest.Server, metav1.GetOptions{})
		require.NoError(t, err)
		// The file is written as render writes it: only the changed line
		// differs, and the runner accepts it.
		require.Equal(t, strings.Replace(file, "currentCpus: 8\n", "currentCpus: 4\n", 1), after.Data[vmpod.ConfigFile])
		cfg, err := runnerconfig.Parse([]byte(after.Data[vmpod.ConfigFile]))
		require.NoError(t, err)
		require.Equal(t, int32(4), cfg.VM.CurrentCPUs)
		require.Equal(t, before.Labels, after.Labels)
		require.Equal(t, before.Annotations, after.Annotations)

		// A change the runner would refuse is not written.
		err = c.UpdateConfig(ctx, vm, &warnings, func(cfg *runnerconfig.Config) error {
			cfg.VM.CurrentCPUs = -1
			return nil
		})
		require.EqualError(t, err, `configmap other/server: /Runner.vm.currentCpus: Invalid value: -1: must be at least 1`)
		unchanged, err := configMaps.Get(ctx, vmtest.Server, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, after.ResourceVersion, unchanged.ResourceVersion)
	})

	// setCPUs sets the GitOps VM's currentCpus as c and returns the
	// warnings and the ConfigMap written.
	setCPUs := func(t *testing.T, c *vmclient.Client, cpus int32) (string, *corev1.ConfigMap) {
		t.Helper()
		vm, err := c.Get(ctx, vmtest.GitOps)
		require.NoError(t, err)
		var warnings bytes.Buffer
		require.NoError(t, c.UpdateConfig(ctx, vm, &warnings, func(cfg *runnerconfig.Config) error {
			cfg.VM.CurrentCPUs = cpus
			return nil
		}))
		cm, err := e.Kube.CoreV1().ConfigMaps(vmtest.Namespace).Get(ctx, vmtest.GitOps, metav1.GetOptions{})
		require.NoError(t, err)
		return warnings.String(), cm
	}

	t.Run("update config annotates the pod", func(t *testing.T) {
		warnings, cm := setCPUs(t, c, 1)
		require.Empty(t, warnings)
		pod, err := e.Kube.CoreV1().Pods(vmtest.Namespace).Get(ctx, vmtest.GitOps+"-0", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, cm.ResourceVersion, pod.Annotations[podsync.AnnotationConfigVersion], "the kubelet is nudged to refresh the ConfigMap")
	})

	t.Run("update config without the right to patch pods warns", func(t *testing.T) {
		const user = "config-editor"
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{v1.Group}, Resources: []string{"vms"}, Verbs: []string{"get"}},
				{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "update"}},
			},
		}
		_, err := e.Kube.RbacV1().Roles(vmtest.Namespace).Create(ctx, role, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = e.Kube.RbacV1().RoleBindings(vmtest.Namespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, testcluster.WaitAllowed(ctx, e.Kube, user, vmtest.Namespace, role.Rules...))
		flags := e.ConfigFlags(vmtest.Namespace)
		flags.Impersonate = ptr.To(user)
		editor, err := vmclient.New(flags)
		require.NoError(t, err)

		// The change is made; only its way to the runner is slower.
		warnings, cm := setCPUs(t, editor, 2)
		require.Contains(t, warnings, "warning: the change may take a minute to reach the runner: ")
		require.Contains(t, warnings, `User "config-editor" cannot patch resource "pods"`)
		require.Contains(t, warnings, "ask a cluster administrator")
		cfg, err := runnerconfig.Parse([]byte(cm.Data[vmpod.ConfigFile]))
		require.NoError(t, err)
		require.Equal(t, int32(2), cfg.VM.CurrentCPUs)
	})
}
