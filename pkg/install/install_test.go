package install_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

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
		"ValidatingAdmissionPolicy/vm-user",
		"ValidatingAdmissionPolicyBinding/vm-user",
		"ValidatingAdmissionPolicy/vm-runner-own-vm",
		"ValidatingAdmissionPolicyBinding/vm-runner-own-vm",
		"ValidatingAdmissionPolicy/vm-node-devices",
		"ValidatingAdmissionPolicyBinding/vm-node-devices",
		"ServiceAccount/vm-node",
		"ClusterRole/vm-node",
		"ClusterRoleBinding/vm-node",
		"DaemonSet/vm-node",
		"Deployment/vm-operator",
	}, names(objs))
	agent := 0
	for _, o := range objs {
		require.Equal(t, "vm-operator", o.GetLabels()["app.kubernetes.io/name"], o.GetName())
		require.Equal(t, "vmop", o.GetLabels()["app.kubernetes.io/part-of"], o.GetName())
		if install.IsNodeAgent(o) {
			require.Equal(t, "node-agent", o.GetLabels()["app.kubernetes.io/component"])
			require.Contains(t, []string{install.NodeAgentName, "vm-node-devices"}, o.GetName())
			agent++
		}
	}
	require.Equal(t, 6, agent, "the node agent's admission policy and binding, ServiceAccount, ClusterRole(Binding) and DaemonSet")
}

// TestNodeAgentOnly: the namespace and the node agent, no CRD, operator,
// runner role or admission policy.
func TestNodeAgentOnly(t *testing.T) {
	objs, err := install.Objects(install.Options{NodeAgentOnly: true, Namespace: "agent"})
	require.NoError(t, err)
	require.Equal(t, []string{
		"Namespace/agent",
		"ValidatingAdmissionPolicy/vm-node-devices",
		"ValidatingAdmissionPolicyBinding/vm-node-devices",
		"ServiceAccount/vm-node",
		"ClusterRole/vm-node",
		"ClusterRoleBinding/vm-node",
		"DaemonSet/vm-node",
	}, names(objs))
	ds := daemonSet(t, objs)
	require.Equal(t, "agent", ds.Namespace)
	require.Equal(t, "privileged", objs[0].GetLabels()["pod-security.kubernetes.io/enforce"],
		"Pod Security admits the privileged agent in its namespace")
}

// daemonSet is the node agent's DaemonSet of objs.
func daemonSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			var ds appsv1.DaemonSet
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &ds, true))
			return &ds
		}
	}
	t.Fatal("no DaemonSet")
	return nil
}

// TestNodeAgentDaemonSet pins the node agent's pod: privileged with the
// host's PIDs, the kubelet's pods and device plugin directories, on every
// node, for the kubelet root and the registry asked for.
func TestNodeAgentDaemonSet(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v1.2.3"

	ds := daemonSet(t, must(install.Objects(install.Options{})))
	require.Equal(t, install.NodeAgentName, ds.Name)
	require.Equal(t, install.DefaultNamespace, ds.Namespace)
	require.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, ds.Spec.UpdateStrategy.Type)
	require.Equal(t, map[string]string{"app.kubernetes.io/name": "vm-node"}, ds.Spec.Selector.MatchLabels)
	require.Equal(t, "node-agent", ds.Spec.Template.Labels["app.kubernetes.io/component"])
	pod := ds.Spec.Template.Spec
	require.Equal(t, install.NodeAgentName, pod.ServiceAccountName)
	require.True(t, pod.HostPID)
	require.False(t, pod.HostNetwork)
	require.Equal(t, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, pod.Tolerations)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, "ghcr.io/vmop/vm-node:v1.2.3", c.Image)
	require.Equal(t, []string{
		"--node-name=$(NODE_NAME)",
		"--kubelet-root-dir=/var/lib/kubelet",
		"--runner-repository=ghcr.io/vmop/vm-runner",
	}, c.Args)
	require.Equal(t, []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}, c.Env)
	require.Equal(t, ptr.To(true), c.SecurityContext.Privileged)
	require.Equal(t, corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}, c.Resources)
	requireHostPaths(t, ds, "/var/lib/kubelet/pods")

	// k0s' kubelet, from a mirror: only the pods' directory moves, the
	// device plugins' is the kubelet's fixed one.
	ds = daemonSet(t, must(install.Objects(install.Options{
		KubeletRootDir: "/var/lib/k0s/kubelet",
		ImageRegistry:  "mirror.example:5000/vmop/",
		Image:          "other.example/op:1",
	})))
	c = ds.Spec.Template.Spec.Containers[0]
	require.Equal(t, "mirror.example:5000/vmop/vm-node:v1.2.3", c.Image, "the operator's --image is not the agent's")
	require.Equal(t, []string{
		"--node-name=$(NODE_NAME)",
		"--kubelet-root-dir=/var/lib/k0s/kubelet",
		"--runner-repository=mirror.example:5000/vmop/vm-runner",
	}, c.Args)
	requireHostPaths(t, ds, "/var/lib/k0s/kubelet/pods")
}

// TestNodeAgentRunnerRepositories: the agent trusts the runner repository
// of the image registry first, then those asked for, in order and each
// once, in the agent alone too.
func TestNodeAgentRunnerRepositories(t *testing.T) {
	args := func(opts install.Options) []string {
		t.Helper()
		return daemonSet(t, must(install.Objects(opts))).Spec.Template.Spec.Containers[0].Args
	}
	require.Equal(t, []string{
		"--node-name=$(NODE_NAME)",
		"--kubelet-root-dir=/var/lib/kubelet",
		"--runner-repository=ghcr.io/vmop/vm-runner",
		"--runner-repository=registry.example.com/me/vm-runner",
		"--runner-repository=localhost:5000/vm-runner",
	}, args(install.Options{RunnerRepositories: []string{"registry.example.com/me/vm-runner", "localhost:5000/vm-runner"}}))

	// Duplicates, the registry's one among them, and docker.io's two
	// spellings of one repository: each once, the first spelling kept.
	require.Equal(t, []string{
		"--node-name=$(NODE_NAME)",
		"--kubelet-root-dir=/var/lib/kubelet",
		"--runner-repository=mirror.example:5000/vmop/vm-runner",
		"--runner-repository=docker.io/me/vm-runner",
		"--runner-repository=ghcr.io/vmop/vm-runner",
	}, args(install.Options{
		ImageRegistry: "mirror.example:5000/vmop",
		NodeAgentOnly: true,
		RunnerRepositories: []string{
			"mirror.example:5000/vmop/vm-runner",
			"docker.io/me/vm-runner",
			"ghcr.io/vmop/vm-runner",
			"index.docker.io/me/vm-runner",
			"docker.io/me/vm-runner",
		},
	}))

	// The admission policy of the agent's devices knows the same ones, in
	// each spelling of an image reference.
	policies := 0
	for _, o := range must(install.Objects(install.Options{RunnerRepositories: []string{"docker.io/me/vm-runner", "docker.io/library/vm-runner"}})) {
		if o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == "vm-node-devices" {
			policies++
			vars, _, _ := unstructured.NestedSlice(o.Object, "spec", "variables")
			require.Equal(t, map[string]any{"name": "repositories", "expression": `["ghcr.io/vmop/vm-runner", ` +
				`"docker.io/me/vm-runner", "me/vm-runner", "index.docker.io/me/vm-runner", ` +
				`"docker.io/library/vm-runner", "library/vm-runner", "index.docker.io/library/vm-runner", "vm-runner"]`}, vars[0])
		}
	}
	require.Equal(t, 1, policies)
}

func TestValidateRunnerRepository(t *testing.T) {
	for _, ok := range []string{"ghcr.io/vmop/vm-runner", "registry.example:5000/mirror/vm-runner", "localhost/vm-runner", "docker.io/me/vm-runner"} {
		require.NoError(t, install.ValidateRunnerRepository(ok), ok)
	}
	for _, bad := range []string{
		"", "vm-runner", "me/vm-runner", "ghcr.io", "ghcr.io/", "ghcr.io/vmop/", "ghcr.io//vm-runner",
		"ghcr.io/vmop/vm-runner:v1", "ghcr.io/vmop/vm-runner@sha256:" + strings.Repeat("0", 64),
		"ghcr.io/VMOP/vm-runner", "https://ghcr.io/vmop/vm-runner", "ghcr.io/vmop/vm-runner ",
	} {
		require.EqualError(t, install.ValidateRunnerRepository(bad),
			fmt.Sprintf("%q is not an image repository without tag or digest, such as registry.example:5000/vmop/vm-runner", bad), bad)
	}
}

// requireHostPaths: the DaemonSet mounts the kubelet's pods directory at
// pods, as the host has it and seeing later mounts, and the device plugin
// directory, and nothing else of the host.
func requireHostPaths(t *testing.T, ds *appsv1.DaemonSet, pods string) {
	t.Helper()
	dir := corev1.HostPathDirectory
	require.Equal(t, []corev1.Volume{
		{Name: "kubelet-pods", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pods, Type: &dir}}},
		{Name: "device-plugins", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/kubelet/device-plugins", Type: &dir}}},
	}, ds.Spec.Template.Spec.Volumes)
	hostToContainer := corev1.MountPropagationHostToContainer
	require.Equal(t, []corev1.VolumeMount{
		{Name: "kubelet-pods", MountPath: pods, MountPropagation: &hostToContainer},
		{Name: "device-plugins", MountPath: "/var/lib/kubelet/device-plugins"},
	}, ds.Spec.Template.Spec.Containers[0].VolumeMounts)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
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
	require.Equal(t, 6, namespaced, "ServiceAccounts vm-operator and vm-node, Role, RoleBinding, DaemonSet, Deployment")
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
	_, err = install.Objects(install.Options{RunnerRepositories: []string{"ghcr.io/me/vm-runner", "ghcr.io/me/vm-runner:v1"}})
	require.EqualError(t, err, `runner repository: "ghcr.io/me/vm-runner:v1" is not an image repository without tag or digest, such as registry.example:5000/vmop/vm-runner`)
	for _, dir := range []string{"var/lib/kubelet", "/var/lib/kubelet/", "/var/lib/../lib/kubelet", "/var//lib/kubelet", "."} {
		_, err = install.Objects(install.Options{KubeletRootDir: dir})
		require.EqualError(t, err, fmt.Sprintf("kubelet root dir: %q is not an absolute, clean path, such as /var/lib/kubelet", dir))
	}
}

// ruleLines is a ClusterRole's rules, one line each: API groups,
// resources, verbs and resource names.
func ruleLines(rules []rbacv1.PolicyRule) []string {
	var lines []string
	for _, r := range rules {
		lines = append(lines, fmt.Sprint(r.APIGroups, r.Resources, r.Verbs, r.ResourceNames))
	}
	return lines
}

// TestNodeAgentClusterRole pins the node agent's rights: it reads pods
// and reports events, nothing more.
func TestNodeAgentClusterRole(t *testing.T) {
	role, err := install.NewClusterRole(install.NodeAgentName)
	require.NoError(t, err)
	require.Equal(t, []string{
		"[] [pods] [get list watch] []",
		"[ events.k8s.io] [events] [create patch] []",
	}, ruleLines(role.Rules))
}

// TestRunnerClusterRole pins the runner's rights: write access to what it
// reports and to its own stop switch; of reads only its VM.
func TestRunnerClusterRole(t *testing.T) {
	role, err := install.NewClusterRole(install.RunnerClusterRole)
	require.NoError(t, err)
	require.Equal(t, install.RunnerClusterRole, role.Name)
	require.Equal(t, []string{
		"[vmoperator.jdrupes.org] [vms] [get patch] []",
		"[vmoperator.jdrupes.org] [vms/status] [patch] []",
		"[apps] [statefulsets/scale] [patch] []",
		"[events.k8s.io] [events] [create patch] []",
	}, ruleLines(role.Rules))

	sa, rb := install.RunnerAccess("vms")
	require.Equal(t, "vms", sa.Namespace)
	require.Equal(t, install.RunnerServiceAccount, sa.Name)
	require.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: install.RunnerClusterRole}, rb.RoleRef)
	require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: install.RunnerServiceAccount, Namespace: "vms"}}, rb.Subjects)
}
