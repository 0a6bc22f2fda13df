package install_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/version"
)

func names(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

func TestObjectsInApplyOrder(t *testing.T) {
	objs, err := install.Objects(install.Options{})
	require.NoError(t, err)
	require.Equal(t, []string{
		"CustomResourceDefinition/vms.vmoperator.jdrupes.org",
		"Namespace/vmop-system",
		"ServiceAccount/vm-operator",
		"ClusterRole/vm-operator",
		"ClusterRoleBinding/vm-operator",
		"Role/vm-operator-leader-election",
		"RoleBinding/vm-operator-leader-election",
		"ClusterRole/vm-runner",
		"ClusterRole/vm-user",
		"ValidatingAdmissionPolicy/vm-runner-own-vm",
		"ValidatingAdmissionPolicyBinding/vm-runner-own-vm",
		"Deployment/vm-operator",
	}, names(objs))
	for _, o := range objs {
		require.Equal(t, "vm-operator", o.GetLabels()["app.kubernetes.io/name"], o.GetName())
		require.Equal(t, "vmop", o.GetLabels()["app.kubernetes.io/part-of"], o.GetName())
	}
}

// TestObjectsNamespaceAndImage: nothing of the default namespace is left
// when another is asked for, and the Deployment runs the image asked for.
func TestObjectsNamespaceAndImage(t *testing.T) {
	objs, err := install.Objects(install.Options{Namespace: "elsewhere", Image: "registry.example.com/op:1"})
	require.NoError(t, err)
	namespaced := 0
	for _, o := range objs {
		data, err := json.Marshal(o.Object)
		require.NoError(t, err)
		require.NotContains(t, string(data), install.DefaultNamespace, o.GetName())
		if o.GetNamespace() != "" {
			require.Equal(t, "elsewhere", o.GetNamespace())
			namespaced++
		}
		switch o.GetKind() {
		case "Namespace":
			require.Equal(t, "elsewhere", o.GetName())
		case "RoleBinding", "ClusterRoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			require.Equal(t, "elsewhere", subjects[0].(map[string]any)["namespace"])
		case "Deployment":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			require.Len(t, containers, 1)
			require.Equal(t, "registry.example.com/op:1", containers[0].(map[string]any)["image"])
		}
	}
	require.Equal(t, 4, namespaced, "ServiceAccount, Role, RoleBinding, Deployment")
}

// TestImages: the operator of this version by default, from a mirror with
// ImageRegistry, which the operator is told too (for the runner image).
func TestImages(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v1.2.3"
	operator := func(opts install.Options) map[string]any {
		objs, err := install.Objects(opts)
		require.NoError(t, err)
		for _, o := range objs {
			if o.GetKind() == "Deployment" {
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				return cs[0].(map[string]any)
			}
		}
		t.Fatal("no Deployment")
		return nil
	}
	c := operator(install.Options{})
	require.Equal(t, "ghcr.io/vmop/vm-operator:v1.2.3", c["image"])
	require.NotContains(t, fmt.Sprint(c["args"]), "--image-registry")

	c = operator(install.Options{ImageRegistry: "mirror.example:5000/vmop"})
	require.Equal(t, "mirror.example:5000/vmop/vm-operator:v1.2.3", c["image"])
	require.Contains(t, c["args"], "--image-registry=mirror.example:5000/vmop")

	c = operator(install.Options{ImageRegistry: "mirror.example:5000/vmop", Image: "other.example/op:1"})
	require.Equal(t, "other.example/op:1", c["image"], "--image wins for the operator")

	_, err := install.Objects(install.Options{ImageRegistry: "https://mirror.example"})
	require.ErrorContains(t, err, "is not a registry")
}

func TestObjectsErrors(t *testing.T) {
	_, err := install.Objects(install.Options{Namespace: "Not_A_Namespace"})
	require.ErrorContains(t, err, `namespace "Not_A_Namespace": `)
	_, err = install.Objects(install.Options{Image: "a b"})
	require.EqualError(t, err, `image "a b": must not contain spaces or control characters`)
}

// TestRunnerClusterRole pins the runner's rights: write access to what it
// reports and to its own stop switch; of reads only its VM.
func TestRunnerClusterRole(t *testing.T) {
	role, err := install.NewClusterRole(install.RunnerClusterRole)
	require.NoError(t, err)
	require.Equal(t, install.RunnerClusterRole, role.Name)
	var rules []string
	for _, r := range role.Rules {
		rules = append(rules, fmt.Sprint(r.APIGroups, r.Resources, r.Verbs, r.ResourceNames))
	}
	require.Equal(t, []string{
		"[vmoperator.jdrupes.org] [vms] [get patch] []",
		"[vmoperator.jdrupes.org] [vms/status] [patch] []",
		"[apps] [statefulsets/scale] [patch] []",
		"[events.k8s.io] [events] [create patch] []",
	}, rules)

	sa, rb := install.RunnerAccess("vms")
	require.Equal(t, "vms", sa.Namespace)
	require.Equal(t, install.RunnerServiceAccount, sa.Name)
	require.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: install.RunnerClusterRole}, rb.RoleRef)
	require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: install.RunnerServiceAccount, Namespace: "vms"}}, rb.Subjects)
}
