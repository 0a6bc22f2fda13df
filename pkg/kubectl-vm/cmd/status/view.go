package status

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/pkg/vmstatus"
)

// View is one VM as the read commands (status, list) show it: what its
// spec asks for and what the cluster reports, the same way in both modes.
type View struct {
	*vmclient.VM
	// Pod is the VM's pod, nil when there is none.
	Pod *corev1.Pod
	// Config is the runner config the spec makes: rendered from the
	// VirtualMachine, or read from the ConfigMap in GitOps mode. When it
	// cannot be had, ConfigErr says why.
	Config    *runnerconfig.Config
	ConfigErr error
	// Events are the latest events about the VM, oldest first.
	Events []corev1.Event
	// derived are the conditions as the operator derives them from the
	// pod, for GitOps mode, where no operator writes them.
	derived vmstatus.Conditions
	// NodeAgent is, while the VM may wait for the node agent
	// (NodeAgentMissing, NodeAgentFailed, or a runner not ready on its
	// node), what the agent's pods there are stuck on, or why that cannot
	// be read (NodeAgentErr).
	NodeAgent    []string
	NodeAgentErr error
}

// Load finds what a View of vm needs beyond vmclient.Get.
func Load(ctx context.Context, c *vmclient.Client, vm *vmclient.VM) (*View, error) {
	pod, err := c.Pod(ctx, vm)
	if err != nil {
		return nil, err
	}
	var cm *corev1.ConfigMap
	if vm.Mode == vmclient.ModeGitOps {
		cm, err = c.Kube.CoreV1().ConfigMaps(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm, err = nil, nil
		}
		if err != nil {
			return nil, c.Explain(err)
		}
	}
	v := NewView(vm, pod, cm)
	if err := v.ExplainClaims(ctx, c); err != nil {
		return nil, err
	}
	if v.Events, err = Events(ctx, c, vm, pod); err != nil {
		return nil, err
	}
	if f, ok := vmstatus.CreateFailed(v.Events); ok && vm.Mode == vmclient.ModeGitOps && pod == nil && v.State() == v1.StateRunning {
		// As the operator reads its StatefulSet's events.
		v.derived.Failed = f
	}
	switch phase, _ := v.Phase(); {
	case phase == v1.ReasonNodeAgentMissing || phase == v1.ReasonNodeAgentFailed:
		v.NodeAgent, v.NodeAgentErr = vmstatus.NodeAgentStuck(ctx, c.Kube, v.podNode())
		if v.NodeAgentErr != nil {
			v.NodeAgentErr = c.Explain(v.NodeAgentErr)
		}
	case v.mayWaitForAgent():
		// Only the agent's trouble is news here: not being allowed to
		// read its namespace says nothing about this VM.
		v.NodeAgent, _ = vmstatus.NodeAgentStuck(ctx, c.Kube, v.podNode())
	}
	return v, nil
}

// podNode is the node of the VM's pod, "" before it has one.
func (v *View) podNode() string {
	if v.Pod == nil {
		return ""
	}
	return v.Pod.Spec.NodeName
}

// mayWaitForAgent tells whether the VM's runner, which the node agent
// serves (it requests the agent's devices), is on a node and not ready:
// before qemu starts it waits for the agent there.
func (v *View) mayWaitForAgent() bool {
	if v.podNode() == "" || v.Pod.DeletionTimestamp != nil || v.State() != v1.StateRunning {
		return false
	}
	served := slices.ContainsFunc(v.Pod.Spec.Containers, func(c corev1.Container) bool {
		_, ok := c.Resources.Limits[nodeagent.Resource]
		return c.Name == render.ContainerRunner && ok
	})
	ready := slices.ContainsFunc(v.Pod.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool {
		return cs.Name == render.ContainerRunner && cs.Ready
	})
	return served && !ready
}

// ExplainClaims reads, in GitOps mode, the claims that v's pod waits for
// and names the first that keeps the VM from starting: what the operator
// reads for its status, so that both modes say it.
func (v *View) ExplainClaims(ctx context.Context, c *vmclient.Client) error {
	if v.Mode != vmclient.ModeGitOps {
		return nil
	}
	claims, err := vmstatus.Claims(ctx, c.Kube, v.Pod)
	if err != nil {
		return c.Explain(err)
	}
	v.derived.ExplainClaims(claims)
	return nil
}

// NewView makes the View of vm with its pod and, in GitOps mode, its
// ConfigMap (nil when missing).
func NewView(vm *vmclient.VM, pod *corev1.Pod, cm *corev1.ConfigMap) *View {
	v := &View{VM: vm, Pod: pod}
	restartHash := ""
	if vm.StatefulSet != nil {
		restartHash = vm.StatefulSet.Spec.Template.Annotations[render.AnnotationRestartHash]
	}
	v.derived = vmstatus.FromPod(pod, v.State() == v1.StateRunning, restartHash)
	if vm.Mode == vmclient.ModeOperator {
		// The renderer's config is the operator's, so the spec's values
		// and defaults come out exactly as the runner gets them.
		v.Config, v.ConfigErr = render.RunnerConfig(vm.VM, render.Options{})
		return v
	}
	if cm == nil {
		v.ConfigErr = fmt.Errorf("configmap %s/%s not found", vm.Namespace, vm.Name)
		return v
	}
	v.Config, v.ConfigErr = runnerconfig.Parse([]byte(cm.Data[vmpod.ConfigFile]))
	if v.ConfigErr != nil {
		v.ConfigErr = fmt.Errorf("configmap %s/%s: %w", vm.Namespace, vm.Name, v.ConfigErr)
	}
	return v
}

// Created is when the VM was made: its VirtualMachine, or in GitOps mode
// its StatefulSet.
func (v *View) Created() metav1.Time {
	if v.VM.VM != nil {
		return v.VM.VM.CreationTimestamp
	}
	return v.StatefulSet.CreationTimestamp
}

// Condition returns the operator's or runner's condition typ, nil in
// GitOps mode or before it was reported.
func (v *View) Condition(typ string) *metav1.Condition {
	if v.VM.VM == nil {
		return nil
	}
	return meta.FindStatusCondition(v.VM.VM.Status.Conditions, typ)
}

// State is the desired state: spec.vm.state, or in GitOps mode whether
// the StatefulSet has a replica.
func (v *View) State() v1.VMState {
	if v.Mode == vmclient.ModeOperator {
		if s := v.VM.VM.Spec.VM.State; s != "" {
			return s
		}
		return v1.StateStopped
	}
	if r := v.StatefulSet.Spec.Replicas; r != nil && *r == 0 {
		return v1.StateStopped
	}
	return v1.StateRunning
}

// Phase is what the VM does (Running, Starting, Stopping, Stopped) with an
// explanation: the operator's Running condition, or in GitOps mode what
// the operator would report for the pod.
// A VM that fails shows the failure's reason instead, as kubectl get pods
// shows CrashLoopBackOff; one whose guest a disk's error paused, Paused.
func (v *View) Phase() (phase, message string) {
	if v.Mode == vmclient.ModeOperator {
		return vmstatus.Phase(v.VM.VM.Status.Conditions)
	}
	if f := v.derived.Failed; f.Status == metav1.ConditionTrue {
		return f.Reason, f.Message
	}
	return v.derived.Running.Reason, v.derived.Running.Message
}

// eventsFor names the object of the VM's events for kubectl events --for.
func (v *View) eventsFor() string {
	if v.Mode == vmclient.ModeOperator {
		return "vm/" + v.Name
	}
	return "statefulset/" + v.Name
}

// Ready is the Ready condition's status, or in GitOps mode the pod's.
func (v *View) Ready() string {
	if v.Mode == vmclient.ModeOperator {
		if c := v.Condition(v1.ConditionReady); c != nil {
			return string(c.Status)
		}
		return string(metav1.ConditionUnknown)
	}
	return string(v.derived.Ready.Status)
}

// Node is where the VM runs, "" when nowhere.
func (v *View) Node() string {
	if v.Mode == vmclient.ModeOperator {
		return v.VM.VM.Status.Node
	}
	if v.Pod != nil {
		return v.Pod.Spec.NodeName
	}
	return ""
}

// CPUs and RAM are what the runner reports in use, "" when it reports
// nothing (a stopped VM; in GitOps mode there is no status to report to).
func (v *View) CPUs() string {
	if v.VM.VM == nil || v.VM.VM.Status.CPUs == 0 {
		return ""
	}
	return strconv.Itoa(int(v.VM.VM.Status.CPUs))
}

// RAM: see CPUs.
func (v *View) RAM() string {
	if v.VM.VM == nil {
		return ""
	}
	return v.VM.VM.Status.RAM
}

// Accelerator is what runs the guest, as the runner reports it, with what
// emulation means; "" when nothing reports it (GitOps mode, not running).
func (v *View) Accelerator() string {
	if v.VM.VM == nil {
		return ""
	}
	a := v.VM.VM.Status.Accelerator
	if a == "tcg" {
		return "tcg (emulated, many times slower: the node has no usable /dev/kvm)"
	}
	return a
}

// Guest describes the guest as its agent reports it: the OS, kernel, host
// name and agent version.
func (v *View) Guest() string {
	if v.Mode == vmclient.ModeGitOps {
		return "<not reported: the runner writes what the guest agent tells into a VirtualMachine, and GitOps mode has none>"
	}
	st := v.VM.VM.Status
	if st.GuestAgentVersion == "" {
		return "<no guest agent connected>"
	}
	var os v1.OSInfo
	if st.OSInfo != nil {
		_ = json.Unmarshal(st.OSInfo.Raw, &os)
	}
	parts := []string{cmp.Or(os.PrettyName, os.Name, "unknown OS")}
	if os.KernelRelease != "" {
		parts = append(parts, "kernel "+os.KernelRelease)
	}
	if st.Hostname != "" {
		parts = append(parts, "host name "+st.Hostname)
	}
	return strings.Join(append(parts, "agent "+st.GuestAgentVersion), ", ")
}

// Interfaces are the guest's network interfaces its agent reports.
func (v *View) Interfaces() []v1.GuestInterface {
	if v.VM.VM == nil {
		return nil
	}
	return v.VM.VM.Status.Interfaces
}

// IP is where the guest is reached: the pod's IP for a guest on the pod's
// network, else the guest's first address as its agent reports it,
// without its prefix length; "" when unknown.
func (v *View) IP() string {
	if ip := v.podIP(); ip != "" && v.Config != nil && v.Config.VM.PodNetwork() != nil {
		return ip
	}
	for _, i := range v.Interfaces() {
		for _, a := range i.IPAddresses {
			ip, _, _ := strings.Cut(a, "/")
			return ip
		}
	}
	return ""
}

// ConsoleClient is the address of the connected SPICE client, "" when
// none is or nothing reports it (GitOps mode).
func (v *View) ConsoleClient() string {
	if v.VM.VM == nil {
		return ""
	}
	return v.VM.VM.Status.ConsoleClient
}

// RestartPending tells whether the VM runs an outdated spec that applies
// only at its next start, and why: the operator's RestartRequired
// condition, else (GitOps mode, or not reported yet) the same comparison
// the operator makes, of the pod's restart hash with its StatefulSet's.
func (v *View) RestartPending() (bool, string) {
	c := v.Condition(v1.ConditionRestartRequired)
	if c == nil {
		c = &v.derived.RestartRequired
	}
	return c.Status == metav1.ConditionTrue, c.Message
}

// DisplaySecret is the Secret with the display password that the pod
// mounts; the conventional name before a StatefulSet exists.
func (v *View) DisplaySecret() string {
	if v.StatefulSet != nil {
		if name := displaySecret(v.StatefulSet); name != "" {
			return name
		}
	}
	return render.DisplaySecretName(v.Name)
}

// displaySecret finds the Secret projected with the display password into
// the runner's config volume.
func displaySecret(sts *appsv1.StatefulSet) string {
	for _, vol := range sts.Spec.Template.Spec.Volumes {
		if vol.Name != render.VolumeConfig || vol.Projected == nil {
			continue
		}
		for _, src := range vol.Projected.Sources {
			if src.Secret == nil {
				continue
			}
			for _, item := range src.Secret.Items {
				if item.Key == vmpod.DisplayPasswordFile {
					return src.Secret.Name
				}
			}
		}
	}
	return ""
}

// Age is how long ago t was, as kubectl get shows it.
func Age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// podIP is the VM's pod's IP, "" without a pod or before it has one.
func (v *View) podIP() string {
	if v.Pod == nil {
		return ""
	}
	return v.Pod.Status.PodIP
}
