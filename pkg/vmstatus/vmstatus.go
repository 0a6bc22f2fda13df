// Package vmstatus derives a VM's conditions from its pod (and, while
// the pod waits for them, its claims, or while it cannot be created, its
// StatefulSet's events). The operator writes them into the
// VirtualMachine's status; the plugin computes the same in GitOps mode,
// where nothing writes a status. One set of rules serves both, so that a
// VM reads the same either way.
package vmstatus

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// Conditions are the pod-derived conditions of a VM.
type Conditions struct {
	Running, Ready, RestartRequired, Failed metav1.Condition
}

// List returns them in the order the status shows them.
func (c Conditions) List() []metav1.Condition {
	return []metav1.Condition{c.Running, c.Ready, c.RestartRequired, c.Failed}
}

// FromPod derives the conditions: pod is the VM's pod (nil when it has
// none), want whether the VM is meant to run, and restartHash the
// restart hash of its StatefulSet's template ("" when unknown).
func FromPod(pod *corev1.Pod, want bool, restartHash string) Conditions {
	c := Conditions{
		Running:         Condition(v1.ConditionRunning, false, v1.ReasonStopped, "The VM is stopped."),
		Ready:           Condition(v1.ConditionReady, false, v1.ReasonPodNotReady, "The VM has no pod."),
		RestartRequired: Condition(v1.ConditionRestartRequired, false, v1.ReasonUpToDate, "The VM runs with its current spec."),
		Failed:          Condition(v1.ConditionFailed, false, v1.ReasonNoFailure, ""),
	}
	if pod == nil {
		if want {
			c.Running = Condition(v1.ConditionRunning, false, v1.ReasonStarting, "Waiting for the runner pod.")
		} else {
			// Ready as asked: kstatus (Flux's wait, Helm's) takes a
			// False Ready for work in progress, which a stopped VM is not.
			c.Ready = Condition(v1.ConditionReady, true, v1.ReasonStopped, "The VM is stopped, as its spec says.")
		}
		return c
	}
	switch doing := importing(pod); {
	case pod.DeletionTimestamp != nil:
		c.Running = Condition(v1.ConditionRunning, pod.Status.Phase == corev1.PodRunning, v1.ReasonStopping, "The guest is shutting down.")
	case pod.Status.Phase == corev1.PodRunning:
		c.Running = Condition(v1.ConditionRunning, true, v1.ReasonRunning, "The runner pod runs on "+pod.Spec.NodeName+".")
	case !want:
		c.Running = Condition(v1.ConditionRunning, false, v1.ReasonStopping, "The pod is ending.")
	case doing != "":
		c.Running = Condition(v1.ConditionRunning, false, v1.ReasonStarting, doing)
	default:
		c.Running = Condition(v1.ConditionRunning, false, v1.ReasonStarting, "The runner pod is "+strings.ToLower(string(pod.Status.Phase))+".")
	}
	if podReady(pod) {
		c.Ready = Condition(v1.ConditionReady, true, v1.ReasonPodReady, "The runner reports the VM ready.")
	} else {
		c.Ready.Message = "The runner pod is not ready."
	}
	if restartHash != "" && pod.Annotations[render.AnnotationRestartHash] != restartHash {
		c.RestartRequired = Condition(v1.ConditionRestartRequired, true, v1.ReasonRestartPending,
			"The spec changed in a way that applies only when the VM starts (e.g. maximumRam, disks, firmware); stop and start the VM to apply it.")
	}
	if f, ok := podFailure(pod); ok {
		c.Failed = f
	}
	return c
}

// startFailures are the runner's exit codes for a VM that cannot start
// as configured on its node, which no restart mends: the Failed condition's
// reason, and its message when the runner left none.
var startFailures = map[int32]struct{ reason, fallback string }{
	runnerconfig.ExitQemuRefused: {v1.ReasonQemuFailed, "qemu refused to start the VM"},
	runnerconfig.ExitNetwork:     {v1.ReasonNetworkFailed, "the runner could not set up the VM's network"},
	runnerconfig.ExitImport:      {v1.ReasonImportFailed, "a disk of the VM is not filled from its image"},
	runnerconfig.ExitNodeAgent:   {v1.ReasonNodeAgentFailed, "vmop's node agent did not prepare the VM's pod"},
}

// startFailed is the Failed condition of a runner that ended with one of
// startFailures: the termination message is the runner's error (ending
// with qemu's words when qemu refused).
func startFailed(t *corev1.ContainerStateTerminated, restarts int32) (metav1.Condition, bool) {
	f, ok := startFailures[t.ExitCode]
	if !ok {
		return metav1.Condition{}, false
	}
	msg := cmp.Or(strings.TrimSpace(t.Message), f.fallback)
	return Condition(v1.ConditionFailed, true, f.reason, fmt.Sprintf("%s (%d restarts).", msg, restarts)), true
}

// runnerFailed is the Failed condition of a runner that failed and was
// restarted: t is how it ended last (nil if unknown).
func runnerFailed(t *corev1.ContainerStateTerminated, restarts int32) metav1.Condition {
	if t != nil {
		if c, ok := startFailed(t, restarts); ok {
			return c
		}
	}
	msg := fmt.Sprintf("The runner failed %d times", restarts)
	if t != nil {
		msg += fmt.Sprintf("; last exit code %d", t.ExitCode)
		if m := strings.TrimSpace(t.Message); m != "" {
			msg += ": " + m
		}
	}
	return Condition(v1.ConditionFailed, true, v1.ReasonCrashLoop, msg+".")
}

// Phase is what a VM does, in a word, with why: the reason of its Failed
// condition when True (as kubectl get pods shows CrashLoopBackOff), else
// Paused while a disk's error or a panic holds the guest, else the
// Running condition's reason; Unknown before anything reported.
func Phase(conds []metav1.Condition) (phase, message string) {
	if c := meta.FindStatusCondition(conds, v1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
		return c.Reason, c.Message
	}
	if c := meta.FindStatusCondition(conds, v1.ConditionPaused); c != nil && c.Status == metav1.ConditionTrue {
		return v1.ConditionPaused, c.Message
	}
	if c := meta.FindStatusCondition(conds, v1.ConditionRunning); c != nil {
		return c.Reason, c.Message
	}
	return PhaseUnknown, "vm-operator has not reported on the VM."
}

// PhaseUnknown is the phase of a VM that nothing reported on.
const PhaseUnknown = "Unknown"

// LastSeen is when an event last happened, whichever API wrote it: core
// v1 (lastTimestamp, count) or events.k8s.io (eventTime, series).
func LastSeen(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if e.EventTime.After(t) {
		t = e.EventTime.Time
	}
	return t
}

// Condition makes a condition without times.
func Condition(typ string, on bool, reason, msg string) metav1.Condition {
	s := metav1.ConditionFalse
	if on {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFailure reports a runner that keeps failing, with what it said last
// (the pod's termination message falls back to the end of its log), a
// runner image the node cannot pull, a container the kubelet cannot
// create, or a pod that no node can take.
func podFailure(pod *corev1.Pod) (metav1.Condition, bool) {
	if c, ok := importFailure(pod); ok {
		return c, true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != render.ContainerRunner {
			continue
		}
		// Between qemu's refusal and the kubelet's back-off the container
		// is terminated, not yet waiting.
		if t := cs.State.Terminated; t != nil {
			if c, ok := startFailed(t, cs.RestartCount); ok {
				return c, true
			}
		}
		// Restarted after a failure and not yet ready (its readiness probe
		// asks whether qemu runs): still failing, until the VM runs.
		if t := cs.LastTerminationState.Terminated; cs.State.Running != nil && !cs.Ready && t != nil && t.ExitCode != 0 {
			return runnerFailed(t, cs.RestartCount), true
		}
		if c, ok := waitingFailure(cs.State.Waiting, "the runner image "+cs.Image, "the runner's container"); ok {
			return c, true
		}
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			return runnerFailed(cs.LastTerminationState.Terminated, cs.RestartCount), true
		}
	}
	if pc := unscheduled(pod); pc != nil {
		return unschedulable(pod.Namespace, pc.Message), true
	}
	return metav1.Condition{}, false
}

// DocsStorage is where the docs say what storage a VM's pod claims and
// how a cluster gets it.
const DocsStorage = "https://github.com/vmop/vmop/blob/main/docs/getting-started.md#storage"

// DocsGitOps is where the docs say what GitOps mode needs.
const DocsGitOps = "https://github.com/vmop/vmop/blob/main/docs/getting-started.md#2-operator-mode-or-gitops-mode"

// The scheduler's words (k8s.io/kubernetes, plugin VolumeBinding) for a
// pod whose claims stop it before any node is tried.
const (
	schedClaimNotFound = "persistentvolumeclaim %q not found"
	schedUnboundClaims = "pod has unbound immediate PersistentVolumeClaims"
)

// unscheduled is the pod's PodScheduled condition while no node takes
// it, nil otherwise.
func unscheduled(pod *corev1.Pod) *corev1.PodCondition {
	for i, pc := range pod.Status.Conditions {
		if pc.Type == corev1.PodScheduled && pc.Status == corev1.ConditionFalse && pc.Reason == corev1.PodReasonUnschedulable {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// nodeAgentNamespace is where kubectl vm install puts the node agent's
// DaemonSet (install.DefaultNamespace, which this package does not link).
const nodeAgentNamespace = "vmop-system"

// unschedulable is the Failed condition of a pod that no node takes: the
// scheduler's words, or what to create when the missing piece is one
// vmop asks of the namespace, the image repository, or of the cluster,
// the node agent.
func unschedulable(namespace, msg string) metav1.Condition {
	if strings.Contains(msg, fmt.Sprintf(schedClaimNotFound, render.ImageRepositoryClaim)) {
		return Condition(v1.ConditionFailed, true, v1.ReasonImageRepositoryMissing, fmt.Sprintf(
			"The VM has a CD drive, so its pod mounts the namespace's image repository, the PersistentVolumeClaim %s, "+
				"and namespace %s has none. Create it, even for an empty drive (media are inserted into a running VM from it): see %s",
			render.ImageRepositoryClaim, namespace, DocsStorage))
	}
	// The scheduler names the resource a node lacks ("1 Insufficient
	// devices.vmop.io/vm"): only the agent's device plugin offers it.
	if strings.Contains(msg, nodeagent.Resource) {
		return Condition(v1.ConditionFailed, true, v1.ReasonNodeAgentMissing, fmt.Sprintf(
			"No node offers the VM's pod %s, the devices of vmop's node agent (the scheduler: %s). "+
				"Install the node agent with kubectl vm install (kubectl vm install --node-agent-only where no operator runs, e.g. GitOps), "+
				"and check that its DaemonSet %[4]s in namespace %[3]s is ready on the VM's node: kubectl get daemonset -n %[3]s %[4]s",
			nodeagent.Resource, strings.TrimSpace(msg), nodeAgentNamespace, nodeAgentDaemonSet))
	}
	return Condition(v1.ConditionFailed, true, v1.ReasonUnschedulable, msg)
}

// WaitingClaims are the claims that pod mounts when the scheduler says
// it waits for claims to be bound, nil otherwise: ExplainClaims reads
// them.
func WaitingClaims(pod *corev1.Pod) []string {
	if pod == nil {
		return nil
	}
	if pc := unscheduled(pod); pc == nil || !strings.Contains(pc.Message, schedUnboundClaims) {
		return nil
	}
	var names []string
	for _, vol := range pod.Spec.Volumes {
		if c := vol.PersistentVolumeClaim; c != nil {
			names = append(names, c.ClaimName)
		}
	}
	return names
}

// Claim is a claim the pod waits for, with what its class tells.
type Claim struct {
	corev1.PersistentVolumeClaim
	// Class is the StorageClass the claim names; nil when it names none,
	// the class does not exist, or it could not be read.
	Class *storagev1.StorageClass
	// ClassUnknown: the class could not be read (no right to).
	ClassUnknown bool
}

// class is the StorageClass a claim names (the beta annotation first,
// as the volume controller reads it), nil when it names none.
func class(pvc *corev1.PersistentVolumeClaim) *string {
	if a, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return &a
	}
	return pvc.Spec.StorageClassName
}

// Claims reads those of WaitingClaims(pod) that exist, and their
// classes, for ExplainClaims.
func Claims(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) ([]Claim, error) {
	var claims []Claim
	for _, name := range WaitingClaims(pod) {
		pvc, err := kube.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s of pod %s: %w", pod.Namespace, name, pod.Name, err)
		}
		c := Claim{PersistentVolumeClaim: *pvc}
		if cl := class(pvc); cl != nil && *cl != "" {
			c.Class, err = kube.StorageV1().StorageClasses().Get(ctx, *cl, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				c.Class = nil
			case apierrors.IsForbidden(err):
				c.Class, c.ClassUnknown = nil, true
			case err != nil:
				return nil, fmt.Errorf("storage class %s of claim %s/%s: %w", *cl, pod.Namespace, name, err)
			}
		}
		claims = append(claims, c)
	}
	return claims, nil
}

// ExplainClaims makes the Failed condition of a pod that waits for its
// claims (WaitingClaims) name the first one that keeps it waiting and
// what it needs; claims are from Claims. Claims bound meanwhile leave the
// scheduler's words, which its next try replaces.
func (c *Conditions) ExplainClaims(claims []Claim) {
	if c.Failed.Reason != v1.ReasonUnschedulable {
		return
	}
	for _, pvc := range claims {
		if msg, reason := claimWaits(pvc); msg != "" {
			c.Failed = Condition(v1.ConditionFailed, true, reason, msg+": see "+DocsStorage)
			return
		}
	}
}

// claimWaits says why a claim keeps its pod from being scheduled, and the
// Failed condition's reason; "" when it does not.
func claimWaits(c Claim) (msg, reason string) {
	cl := class(&c.PersistentVolumeClaim)
	switch {
	// "": new, before the volume controller's first look.
	case c.Status.Phase != corev1.ClaimPending && c.Status.Phase != "":
		return "", ""
	case cl == nil:
		// Admission gives a claim without a class the default class
		// when one exists, and the volume controller does when one is
		// made later: without a class, there is none.
		return fmt.Sprintf("Claim %s names no StorageClass and the cluster has no default one, so nothing binds it. "+
			"Mark a StorageClass as the default (annotation storageclass.kubernetes.io/is-default-class: \"true\"), "+
			"or on a single node without a storage provisioner apply examples/single-node/storage.yaml", c.Name), v1.ReasonNoDefaultStorageClass
	case *cl == "":
		return fmt.Sprintf("Claim %s has storageClassName \"\", so only a PersistentVolume without a class binds it, and none that matches it "+
			"(size, access mode, volume mode, selector) is available. Create one", c.Name), v1.ReasonClaimPending
	case c.ClassUnknown:
		return "", ""
	case c.Class == nil:
		return fmt.Sprintf("Claim %s names StorageClass %s, which does not exist. Create the class, or name one of kubectl get storageclass",
			c.Name, *cl), v1.ReasonClaimPending
	case ptr.Deref(c.Class.VolumeBindingMode, storagev1.VolumeBindingImmediate) == storagev1.VolumeBindingWaitForFirstConsumer:
		// Bound once a node is chosen: pending is its due state.
		return "", ""
	default:
		return fmt.Sprintf("Claim %s of StorageClass %s is not bound. Check that the class's provisioner (%s) runs: kubectl describe pvc -n %s %s",
			c.Name, *cl, c.Class.Provisioner, c.Namespace, c.Name), v1.ReasonClaimPending
	}
}

// EventFailedCreate is the StatefulSet controller's event for a pod it
// cannot create.
const EventFailedCreate = "FailedCreate"

// missingAccount finds the account in the API server's refusal of a pod
// whose ServiceAccount does not exist (admission plugin ServiceAccount).
var missingAccount = regexp.MustCompile(`error looking up service account ([^/ ]+)/([^: ]+): serviceaccount "[^"]+" not found`)

// CreateFailed is the Failed condition of a VM whose StatefulSet cannot
// create its pod, from the StatefulSet controller's FailedCreate events
// among events (the latest counts): admission, quota or a missing
// ServiceAccount leave no other trace.
func CreateFailed(events []corev1.Event) (metav1.Condition, bool) {
	var latest *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Reason != EventFailedCreate || e.InvolvedObject.Kind != "StatefulSet" {
			continue
		}
		if latest == nil || LastSeen(e).After(LastSeen(latest)) {
			latest = e
		}
	}
	if latest == nil {
		return metav1.Condition{}, false
	}
	if m := missingAccount.FindStringSubmatch(latest.Message); m != nil {
		return Condition(v1.ConditionFailed, true, v1.ReasonServiceAccountMissing, fmt.Sprintf(
			"The pod runs as ServiceAccount %s, which namespace %s lacks. Create it and bind it to the ClusterRole vm-runner "+
				"(kubectl create serviceaccount -n %[2]s %[1]s; kubectl create rolebinding -n %[2]s %[1]s --clusterrole vm-runner --serviceaccount %[2]s:%[1]s), "+
				"or render the VM without --service-account: see %[3]s",
			m[2], m[1], DocsGitOps)), true
	}
	return Condition(v1.ConditionFailed, true, v1.ReasonPodCreateFailed, latest.Message), true
}

// waitingFailure is the Failed condition of a container that waits
// because the node cannot pull its image or start it: image and container
// name them in the message ("the runner image X", "the runner's
// container").
func waitingFailure(w *corev1.ContainerStateWaiting, image, container string) (metav1.Condition, bool) {
	switch {
	case w == nil:
	case slices.Contains(PullFailures, w.Reason):
		return Condition(v1.ConditionFailed, true, v1.ReasonImagePull,
			fmt.Sprintf("The node cannot pull %s (%s): %s", image, w.Reason, w.Message)), true
	case slices.Contains(StartFailures, w.Reason):
		return Condition(v1.ConditionFailed, true, v1.ReasonContainerCreate,
			fmt.Sprintf("The node cannot start %s (%s): %s", container, w.Reason, w.Message)), true
	}
	return metav1.Condition{}, false
}

// The kubelet's reasons for a waiting container that waiting alone does
// not start: it cannot pull the image, or cannot create or start the
// container.
var (
	PullFailures  = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
	StartFailures = []string{"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
)

// importing says what the pod's running init container does, "" when
// none runs: all of them fill disks from their sources before the runner
// starts.
func importing(pod *corev1.Pod) string {
	for _, cs := range pod.Status.InitContainerStatuses {
		switch {
		case cs.State.Running == nil:
		case strings.HasPrefix(cs.Name, render.ContainerFetch):
			return "The pod copies a disk out of its containerDisk image " + cs.Image + "."
		default:
			return "The pod fills the VM's disks from their source images (see the Imported condition)."
		}
	}
	return ""
}

// importFailure reports a failure of the pod's init containers, which
// the kubelet retries with back-off: an image the node cannot pull (a
// containerDisk's, or the runner's), or a container that cannot start, or
// last words that name the disk and the cause. While one runs again, its
// failure stands until it succeeds.
func importFailure(pod *corev1.Pod) (metav1.Condition, bool) {
	for _, cs := range pod.Status.InitContainerStatuses {
		if c, ok := waitingFailure(cs.State.Waiting, "the image "+cs.Image+" of init container "+cs.Name, "init container "+cs.Name); ok {
			return c, true
		}
		t := cs.State.Terminated
		if t == nil {
			// Running again, or waiting in back-off.
			t = cs.LastTerminationState.Terminated
		}
		if t == nil || t.ExitCode == 0 {
			continue
		}
		msg := cmp.Or(strings.TrimSpace(t.Message), fmt.Sprintf("init container %s exited with %d", cs.Name, t.ExitCode))
		return Condition(v1.ConditionFailed, true, v1.ReasonImportFailed, fmt.Sprintf("%s (%d restarts).", msg, cs.RestartCount)), true
	}
	return metav1.Condition{}, false
}
