package install_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/vmpod"
)

// TestDevicesOnAPIServer: only a VM's pod as vmop renders it may request
// the node agent's devices; pods that do not request them are left alone.
func TestDevicesOnAPIServer(t *testing.T) {
	s := newServer(t)
	ctx := t.Context()
	cs := s.Client()
	// The node agent alone, as for GitOps, trusting two more repositories.
	s.install(t, install.Options{NodeAgentOnly: true, RunnerRepositories: []string{"docker.io/me/vm-runner", "localhost:5000/vm-runner"}})
	// Operator mode's pods run as its runner account, which no operator
	// makes here.
	sa, _ := install.RunnerAccess(vmNamespace)
	_, err := cs.CoreV1().ServiceAccounts(vmNamespace).Create(ctx, sa, metav1.CreateOptions{})
	require.NoError(t, err)

	// A VM with init containers that import and fetch its disks.
	data, err := os.ReadFile(filepath.Join("..", "render", "testdata", "disk-source", "input.yaml"))
	require.NoError(t, err)
	js, err := yaml.YAMLToJSON(data)
	require.NoError(t, err)
	vm, err := v1.DecodeJSON(js)
	require.NoError(t, err)
	vm.Namespace = vmNamespace
	rendered := func(image string, opts render.Options) *corev1.Pod {
		vm := vm.DeepCopy()
		if image != "" {
			vm.Spec.Image = &v1.Image{Source: image}
		}
		objs, err := render.Render(vm, opts)
		require.NoError(t, err)
		tmpl := objs.StatefulSet.Spec.Template
		pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
		pod.Name = render.PodName(vm.Name)
		// What the StatefulSet controller adds.
		for _, c := range objs.StatefulSet.Spec.VolumeClaimTemplates {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name + "-" + pod.Name}}})
		}
		pod.Spec.AutomountServiceAccountToken = new(false)
		return pod
	}
	create := func(pod *corev1.Pod) error {
		_, err := cs.CoreV1().Pods(vmNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	runner := func(pod *corev1.Pod) *corev1.Container {
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == render.ContainerRunner {
				return &pod.Spec.Containers[i]
			}
		}
		t.Fatal("no runner container")
		return nil
	}
	devices := corev1.ResourceList{nodeagent.Resource: resource.MustParse("1")}

	impostor := rendered("ghcr.io/attacker/vm-runner:v1", render.Options{})
	q := runner(impostor).Resources.Limits[nodeagent.Resource]
	require.Equal(t, "1", q.String(), "a rendered VM pod requests the devices")
	// The API server loads new policies in the background.
	require.Eventually(t, func() bool { return apierrors.IsForbidden(create(impostor)) },
		10*time.Second, 100*time.Millisecond, "the policy takes effect")

	for what, pod := range map[string]*corev1.Pod{
		"operator mode":               rendered("", render.Options{ServiceAccount: install.RunnerServiceAccount}),
		"a mirror":                    rendered("", render.Options{ImageRegistry: "localhost:5000"}),
		"Docker Hub's short spelling": rendered("me/vm-runner:v2", render.Options{}),
		"a digest":                    rendered("docker.io/me/vm-runner@sha256:"+sha, render.Options{}),
		"a tag and a digest":          rendered("ghcr.io/vmop/vm-runner:v1@sha256:"+sha, render.Options{}),
		"no devices": {
			ObjectMeta: metav1.ObjectMeta{Name: "other"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		},
	} {
		require.NoError(t, create(pod), what)
	}

	const (
		notVM      = "vm-node-devices: only a VM's pod (labelled app.kubernetes.io/name=vm-runner, app.kubernetes.io/managed-by=vm-operator) may request devices.vmop.io/vm"
		notRunner  = "vm-node-devices: only a VM pod's container runner may request devices.vmop.io/vm, no other container and no init container"
		notTrusted = "vm-node-devices: the container that requests devices.vmop.io/vm must run a runner image of a repository the node agent trusts: " +
			"ghcr.io/vmop/vm-runner, docker.io/me/vm-runner, me/vm-runner, index.docker.io/me/vm-runner, localhost:5000/vm-runner"
	)
	for what, c := range map[string]struct {
		change func(*corev1.Pod)
		msg    string
	}{
		"another repository":       {func(p *corev1.Pod) { runner(p).Image = "ghcr.io/attacker/vm-runner:v1" }, notTrusted},
		"a longer repository name": {func(p *corev1.Pod) { runner(p).Image = "ghcr.io/vmop/vm-runner-evil:v1" }, notTrusted},
		"a repository beneath":     {func(p *corev1.Pod) { runner(p).Image = "ghcr.io/vmop/vm-runner/evil:v1" }, notTrusted},
		"a port of the registry":   {func(p *corev1.Pod) { runner(p).Image = "localhost:5000/vm-runner:5000/evil" }, notTrusted},
		"another container name":   {func(p *corev1.Pod) { runner(p).Name = "qemu" }, notRunner},
		"a second container": {func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox",
				Resources: corev1.ResourceRequirements{Limits: devices}})
		}, notRunner},
		"an init container": {func(p *corev1.Pod) {
			p.Spec.InitContainers[0].Resources = corev1.ResourceRequirements{Limits: devices}
		}, notRunner},
		"no labels":       {func(p *corev1.Pod) { p.Labels = nil }, notVM},
		"another manager": {func(p *corev1.Pod) { p.Labels[vmpod.LabelManagedBy] = "me" }, notVM},
	} {
		pod := rendered("", render.Options{})
		c.change(pod)
		err := create(pod)
		require.True(t, apierrors.IsForbidden(err), "%s: %v", what, err)
		require.ErrorContains(t, err, c.msg, what)
	}
}

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
