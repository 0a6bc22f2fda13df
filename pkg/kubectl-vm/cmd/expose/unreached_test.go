package expose

import (
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
)

// TestUnreached: the warnings of ports that reach nothing of the guest,
// the same in operator mode (from the VirtualMachine) and GitOps mode
// (from the ConfigMap that render made of it).
func TestUnreached(t *testing.T) {
	notOnPod := func(kinds string) []string {
		return []string{"the guest is not on the pod network (its networks: " + kinds + "): the Service reaches nothing of the guest"}
	}
	for name, c := range map[string]struct {
		networks string // spec.vm.networks
		protocol string
		ports    []Port
		want     []string
	}{
		"user":                 {networks: "[{user: {}}]", want: notOnPod("user")},
		"tap and user":         {networks: "[{tap: {}}, {user: {}}]", want: notOnPod("tap, user")},
		"none":                 {networks: "[]", want: notOnPod("none")},
		"pod":                  {networks: "[{pod: {}}]"},
		"pod and user":         {networks: "[{user: {}}, {pod: {}}]"},
		"pod with its ports":   {networks: "[{pod: {ports: [{port: 22}, {port: 80}]}}]"},
		"pod without port 80":  {networks: "[{user: {}}, {pod: {ports: [{port: 22}, {port: 80, protocol: UDP}]}}]", want: []string{"guest port 80/TCP is not one its pod network passes (spec.vm.networks[1].pod.ports: 22/TCP, 80/UDP): Service port 8080 reaches nothing of the guest"}},
		"pod with UDP ports":   {networks: "[{pod: {ports: [{port: 22, protocol: UDP}, {port: 80, protocol: UDP}]}}]", protocol: "UDP"},
		"pod and SPICE":        {networks: "[{pod: {}}]", ports: []Port{{5900, 5900}, {22, 22}}, want: []string{"port 5900/TCP of the pod is its own SPICE server's: Service port 5900 reaches the VM's display, not the guest"}},
		"pod and SPICE on UDP": {networks: "[{pod: {}}]", ports: []Port{{5900, 5900}}, protocol: "UDP"},
	} {
		t.Run(name, func(t *testing.T) {
			vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "web"}}
			require.NoError(t, yaml.UnmarshalStrict([]byte("networks: "+c.networks), &vm.Spec.VM))
			vm.Spec.VM.Display = &v1.Display{Spice: &v1.Spice{Port: ptr.To[int32](5900)}}
			objs, err := render.Render(vm, render.Options{})
			require.NoError(t, err)
			o := &Options{Ports: []Port{{22, 22}, {8080, 80}}, Protocol: "TCP"}
			if c.ports != nil {
				o.Ports = c.ports
			}
			if c.protocol != "" {
				o.Protocol = c.protocol
			}
			operator := &vmclient.VM{Namespace: "vms", Name: "web", Mode: vmclient.ModeOperator, VM: vm}
			require.Equal(t, c.want, o.unreached(t.Context(), &vmclient.Client{}, operator), "operator mode")
			gitops := &vmclient.VM{Namespace: "vms", Name: "web", Mode: vmclient.ModeGitOps, StatefulSet: objs.StatefulSet}
			require.Equal(t, c.want, o.unreached(t.Context(), &vmclient.Client{Kube: fake.NewClientset(objs.ConfigMap)}, gitops), "GitOps mode")
		})
	}
	// Nothing to tell by: no ConfigMap in GitOps mode.
	o := &Options{Ports: []Port{{22, 22}}, Protocol: "TCP"}
	vm := &vmclient.VM{Namespace: "vms", Name: "web", Mode: vmclient.ModeGitOps, StatefulSet: &appsv1.StatefulSet{}}
	require.Empty(t, o.unreached(t.Context(), &vmclient.Client{Kube: fake.NewClientset()}, vm))
}
