package render_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
)

// restrictedViolations evaluates Pod Security level restricted (latest)
// on the pod template of objs, as the admission plugin would on its pod,
// and returns what it forbids.
func restrictedViolations(t *testing.T, objs *render.Objects) []string {
	t.Helper()
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	tmpl := &objs.StatefulSet.Spec.Template
	res := ev.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec)
	var out []string
	for _, r := range res {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	return out
}

// goldenVMs renders the VirtualMachines of the valid golden cases, by
// case.
func goldenVMs(t *testing.T) map[string][]*v1.VirtualMachine {
	t.Helper()
	vms := map[string][]*v1.VirtualMachine{}
	for name, docs := range goldenVMDocs(t) {
		for _, doc := range docs {
			vm, err := v1.DecodeJSON(doc)
			require.NoError(t, err)
			vms[name] = append(vms[name], vm)
		}
	}
	return vms
}

func hasTap(vm *v1.VirtualMachine) bool {
	for _, n := range vm.Spec.VM.Networks {
		if n.Tap != nil {
			return true
		}
	}
	return false
}

// TestPodSecurityRestricted: the pod of every golden VM without a tap NIC
// passes Pod Security restricted, among them one with every kind of disk
// source (import, import-bin and fetch init containers); the pod of a VM
// with a tap NIC (privileged, host network) does not, so the check can
// fail.
func TestPodSecurityRestricted(t *testing.T) {
	restricted, tap := 0, 0
	for name, vms := range goldenVMs(t) {
		for _, vm := range vms {
			objs, err := render.Render(vm, caseOptions[name].Options)
			require.NoError(t, err, "%s: %s", name, vm.Name)
			violations := restrictedViolations(t, objs)
			if hasTap(vm) {
				require.NotEmpty(t, violations, "%s: %s has a tap NIC and a privileged pod", name, vm.Name)
				tap++
				continue
			}
			require.Empty(t, violations, "%s: %s", name, vm.Name)
			restricted++
		}
	}
	require.NotZero(t, restricted)
	require.NotZero(t, tap)

	vms := goldenVMs(t)["disk-source"]
	require.Len(t, vms, 1)
	objs, err := render.Render(vms[0], render.Options{})
	require.NoError(t, err)
	pod := objs.StatefulSet.Spec.Template.Spec
	var inits []string
	for _, c := range pod.InitContainers {
		inits = append(inits, c.Name)
	}
	require.Equal(t, []string{render.ContainerImportBin, render.ContainerFetch + "2", render.ContainerImport}, inits)
	require.Empty(t, restrictedViolations(t, objs))
}

// TestNodeAgent: a VM's runner asks for one of the agent's devices (a
// limit, the only way to ask for an extended resource), added to
// spec.resources without changing the VM; the runner and the import have
// the agent's socket; a tap VM's pod stays privileged, without the agent.
func TestNodeAgent(t *testing.T) {
	vm := goldenVMs(t)["disk-source"][0]
	vm.Spec.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
	}
	before := vm.DeepCopy()
	objs, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	require.Equal(t, before, vm, "the VM's resources are copied, not changed")
	pod := objs.StatefulSet.Spec.Template.Spec
	runner := pod.Containers[0]
	require.Equal(t, resource.MustParse("1"), runner.Resources.Limits[nodeagent.Resource])
	require.Equal(t, resource.MustParse("2"), runner.Resources.Requests[corev1.ResourceCPU], "the requests are kept")
	socket := corev1.EnvVar{Name: nodeagent.EnvSocket, Value: nodeagent.Dir + "/" + nodeagent.Socket}
	mount := corev1.VolumeMount{Name: nodeagent.Volume, MountPath: nodeagent.Dir}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		asks := c.Name == render.ContainerRunner || c.Name == render.ContainerImport
		require.Equal(t, asks, slices.Contains(c.Env, socket), "%s: env", c.Name)
		require.Equal(t, asks, slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == mount.Name && m.MountPath == mount.MountPath }), "%s: mount", c.Name)
		require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop, c.Name)
	}
	require.Contains(t, pod.Volumes, corev1.Volume{Name: nodeagent.Volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})

	// A request for the device must equal the limit.
	vm.Spec.Resources.Requests[nodeagent.Resource] = resource.MustParse("3")
	objs, err = render.Render(vm, render.Options{})
	require.NoError(t, err)
	r := objs.StatefulSet.Spec.Template.Spec.Containers[0].Resources
	require.Equal(t, resource.MustParse("1"), r.Requests[nodeagent.Resource])
	require.Equal(t, resource.MustParse("1"), r.Limits[nodeagent.Resource])

	vm.Spec.VM.Networks = []v1.Network{{Tap: &v1.TapNetwork{}}}
	objs, err = render.Render(vm, render.Options{})
	require.NoError(t, err)
	pod = objs.StatefulSet.Spec.Template.Spec
	require.True(t, pod.HostNetwork)
	require.Nil(t, pod.SecurityContext)
	require.True(t, *pod.Containers[0].SecurityContext.Privileged)
	require.NotContains(t, pod.Containers[0].Resources.Limits, corev1.ResourceName(nodeagent.Resource))
	for _, vol := range pod.Volumes {
		require.NotEqual(t, nodeagent.Volume, vol.Name)
	}
}
