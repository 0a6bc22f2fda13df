package install_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// TestUserOnAPIServer: the role vm-user reads no Secret, and its exec
// runs only vm-runner in a pod's container runner; whoever may attach to
// pods as well (edit, admin) keeps exec as it was.
func TestUserOnAPIServer(t *testing.T) {
	s := newServer(t)
	ctx := t.Context()
	cs := s.Client()
	s.install(t, install.Options{})
	// alice may run VMs; bob may too, and attach to and exec into any pod
	// (as edit may).
	bind := func(name, user, role string) {
		_, err := cs.RbacV1().RoleBindings(vmNamespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	bind("alice", "alice", install.UserClusterRole)
	bind("bob", "bob", install.UserClusterRole)
	_, err := cs.RbacV1().Roles(vmNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "debug"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach"}, Verbs: []string{"get", "create"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().RoleBindings(vmNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bob-debug"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "debug"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	for _, a := range []struct {
		allowed bool
		attrs   authorizationv1.ResourceAttributes
	}{
		{true, ra("create", "vmoperator.jdrupes.org", "vms", "", vmNamespace)},
		{true, ra("create", "", "pods", "exec", vmNamespace)},
		{true, ra("list", "policy", "poddisruptionbudgets", "", vmNamespace)},
		{false, ra("create", "policy", "poddisruptionbudgets", "", vmNamespace)},
		{false, ra("get", "", "secrets", "", vmNamespace)},
		{false, ra("list", "", "secrets", "", vmNamespace)},
		{false, ra("watch", "", "secrets", "", vmNamespace)},
		{false, ra("create", "", "secrets", "", vmNamespace)},
		{false, ra("update", "", "secrets", "", vmNamespace)},
		{false, ra("create", "", "pods", "attach", vmNamespace)},
	} {
		require.Equal(t, a.allowed, can(t, cs, "alice", a.attrs), "alice may %+v", a.attrs)
	}

	// No kubelet runs: an exec that admission lets by fails on the pod's
	// node, one it refuses never gets there.
	for _, p := range []struct{ name, container string }{{"vm-a-0", "runner"}, {"web", "app"}} {
		_, err = cs.CoreV1().Pods(vmNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				NodeName:                     "nowhere",
				Containers:                   []corev1.Container{{Name: p.container, Image: "image"}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	exec := func(user, pod, container string, command ...string) error {
		ucs := cs // the admin's
		if user != "" {
			ucs = impersonate(t, s.Config, user)
		}
		return ucs.CoreV1().RESTClient().Post().Namespace(vmNamespace).Resource("pods").Name(pod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true}, scheme.ParameterCodec).
			Do(ctx).Error()
	}
	const refused = "vm-user: the role vm-user may exec only vm-runner in a pod's container runner (as kubectl vm does)"
	// The API server loads new policies in the background.
	require.Eventually(t, func() bool { return apierrors.IsForbidden(exec("alice", "web", "app", "sh")) },
		10*time.Second, 100*time.Millisecond, "the policy takes effect")
	for what, c := range map[string]struct {
		user, pod, container string
		command              []string
	}{
		"a shell in another pod":    {"alice", "web", "app", []string{"sh"}},
		"vm-runner in another name": {"alice", "web", "app", []string{"vm-runner", "serial"}},
		"a shell in the runner":     {"alice", "vm-a-0", "runner", []string{"sh", "-c", "cat /var/run/secrets/*"}},
		"no container named":        {"alice", "vm-a-0", "", []string{"vm-runner", "serial"}},
	} {
		err := exec(c.user, c.pod, c.container, c.command...)
		require.True(t, apierrors.IsForbidden(err), "%s: %v", what, err)
		require.ErrorContains(t, err, refused, what)
	}
	for what, c := range map[string]struct {
		user, pod, container string
		command              []string
	}{
		"kubectl vm's serial console": {"alice", "vm-a-0", "runner", []string{"vm-runner", "serial", "--attach", "--who", "alice"}},
		"bob's shell in another pod":  {"bob", "web", "app", []string{"sh"}},
		"the admin's":                 {"", "web", "app", []string{"sh"}},
	} {
		err := exec(c.user, c.pod, c.container, c.command...)
		require.Error(t, err, what)
		require.False(t, apierrors.IsForbidden(err), "%s: %v", what, err)
		require.NotContains(t, err.Error(), "vm-user", what)
	}

	testUserPods(t, s.Cluster)
}

// testUserPods: of pods, vm-user creates only disk upload's uploader.
func testUserPods(t *testing.T, c *testcluster.Cluster) {
	ctx := t.Context()
	vm := &v1.VirtualMachine{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(`
metadata: {name: web, namespace: `+vmNamespace+`}
spec:
  vm:
    disks:
    - volumeClaimTemplate:
        metadata: {name: root}
        spec:
          resources: {requests: {storage: 1Gi}}
`), vm))
	objs, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	_, err = c.Client().AppsV1().StatefulSets(vmNamespace).Create(ctx, objs.StatefulSet, metav1.CreateOptions{})
	require.NoError(t, err)
	image := filepath.Join(t.TempDir(), "root.raw")
	require.NoError(t, os.WriteFile(image, []byte("not much of a disk"), 0o644))
	upload := func(user string) plugintest.Result {
		return plugintest.Run(ctx, "", "--kubeconfig", c.Kubeconfig, "--as", user, "-n", vmNamespace,
			"disk", "upload", "web", "--disk", "root", "--image", image, "--timeout", "1s")
	}
	// No kubelet runs the uploader: it is made, and deleted after the
	// timeout.
	r := upload("alice")
	require.EqualError(t, r.Err, "pod vms/web-disk-upload did not run within 1s (--timeout)")
	require.Contains(t, r.Stderr, "pod/web-disk-upload created; waiting for it to run\n")

	pod := func(change func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-disk-upload", Labels: map[string]string{"app.kubernetes.io/component": "disk-upload"}},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				Containers:                   []corev1.Container{{Name: "runner", Image: "ghcr.io/vmop/vm-runner:v1", Command: []string{"vm-runner", "disk", "wait"}}},
				Volumes: []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "root-disk-web-0"}}}},
			},
		}
		if change != nil {
			change(p)
		}
		return p
	}
	alice := impersonate(t, c.Config, "alice")
	create := func(p *corev1.Pod) error {
		_, err := alice.CoreV1().Pods(vmNamespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	require.NoError(t, create(pod(nil)), "the uploader's shape")
	const refused = "vm-user: the role vm-user may create only the uploader pod of kubectl vm disk upload: one container runner that runs vm-runner disk wait, no ServiceAccount token, no volume but claims and emptyDirs, no Secret in its environment"
	for what, change := range map[string]func(*corev1.Pod){
		"a Secret volume": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-cloud-init"}}})
		},
		"a Secret in the environment": func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "web-cloud-init"}, Key: "userdata"}}}}
		},
		"Secrets as the environment": func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-cloud-init"}}}}
		},
		"a ServiceAccount token": func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil },
		"a shell":                func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh", "-c", "cat /s/*"} },
		"arguments":              func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"--evil"} },
		"another container name": func(p *corev1.Pod) { p.Spec.Containers[0].Name = "app" },
		"a second container": func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "app", Image: "busybox"})
		},
		"an init container":      func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}} },
		"not labelled an upload": func(p *corev1.Pod) { p.Labels = nil },
		"a projected volume": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
		},
	} {
		err := create(pod(change))
		require.True(t, apierrors.IsForbidden(err), "%s: %v", what, err)
		require.ErrorContains(t, err, refused, what)
	}
	// bob may attach, and create pods as before (his own right to create
	// them is vm-user's).
	bob := impersonate(t, c.Config, "bob")
	_, err = bob.CoreV1().Pods(vmNamespace).Create(ctx, pod(func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh"} }),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
}
