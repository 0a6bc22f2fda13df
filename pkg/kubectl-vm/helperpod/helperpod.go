// Package helperpod is the short-lived pod of a VM's runner image that
// the plugin's disk commands run beside a VM (kubectl vm disk upload,
// snapshot, restore): placed as the VM's pod is, since its claims may be
// local to a node, holding some claims, running "vm-runner disk wait"
// until it is deleted while the commands run in it through pods/exec.
// It also knows the VM's claims as its StatefulSet makes them.
package helperpod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/pkg/vmstatus"
)

// Disks are the volume names of the VM's disks with a claim, in the
// StatefulSet's order.
func Disks(sts *appsv1.StatefulSet) []string {
	var names []string
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name != render.VolumeRunnerData {
			names = append(names, t.Name)
		}
	}
	return names
}

// ClaimName is the claim that the StatefulSet controller makes of
// template for the VM's one pod.
func ClaimName(sts *appsv1.StatefulSet, template string) string {
	return template + "-" + render.PodName(sts.Name)
}

// Template finds the volumeClaimTemplate called name.
func Template(sts *appsv1.StatefulSet, name string) *corev1.PersistentVolumeClaim {
	for i := range sts.Spec.VolumeClaimTemplates {
		if t := &sts.Spec.VolumeClaimTemplates[i]; t.Name == name {
			return t
		}
	}
	return nil
}

// NewClaim is the claim of the StatefulSet's template called name, as
// the StatefulSet controller makes it: the same name, labels (the
// template's and the selector's) and spec, so that the VM takes it when
// it starts.
func NewClaim(sts *appsv1.StatefulSet, name string) *corev1.PersistentVolumeClaim {
	claim := Template(sts, name).DeepCopy()
	claim.Name = ClaimName(sts, name)
	claim.Namespace = sts.Namespace
	if claim.Labels == nil {
		claim.Labels = map[string]string{}
	}
	for k, v := range sts.Spec.Selector.MatchLabels {
		claim.Labels[k] = v
	}
	claim.Status = corev1.PersistentVolumeClaimStatus{}
	return claim
}

// Volume is a claim the pod holds: a Block claim as the device Path, a
// Filesystem one mounted at Path.
type Volume struct {
	Name, Claim, Path string
	Block             bool
}

// New is the pod called name, of component (its app.kubernetes.io/
// component label), for the VM of sts: the VM's runner image, placed as
// the VM's pod is, with volumes. It passes Pod Security restricted, as
// the runner's user, as a VM's pod does: disk wait asks the node agent to
// give that user the block devices. It needs none of the agent's devices,
// so it asks for no resource, and it does not talk to the API server.
func New(sts *appsv1.StatefulSet, name, component string, volumes []Volume) (*corev1.Pod, error) {
	tmpl := &sts.Spec.Template.Spec
	var runner *corev1.Container
	for i := range tmpl.Containers {
		if tmpl.Containers[i].Name == render.ContainerRunner {
			runner = &tmpl.Containers[i]
		}
	}
	if runner == nil {
		return nil, fmt.Errorf("statefulset %s/%s has no container %q: cannot tell the VM's runner image", sts.Namespace, sts.Name, render.ContainerRunner)
	}
	// Not the VM's selector labels: neither its StatefulSet (which would
	// adopt the pod) nor its Services take the helper for the VM's pod.
	labels := render.Labels(sts.Name)
	delete(labels, vmpod.LabelName)
	labels[vmpod.LabelComponent] = component
	c := corev1.Container{
		// The runner's name: pods/exec goes to that container.
		Name:            render.ContainerRunner,
		Image:           runner.Image,
		ImagePullPolicy: runner.ImagePullPolicy,
		// Not the image's entrypoint: a VM's own runner image may have
		// another.
		Command:         []string{"vm-runner", "disk", "wait"},
		SecurityContext: render.RestrictedContainer(),
	}
	var vols []corev1.Volume
	for _, v := range volumes {
		if v.Block {
			c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: v.Name, DevicePath: v.Path})
		} else {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: v.Path})
		}
		vols = append(vols, corev1.Volume{Name: v.Name, VolumeSource: claimSource(v.Claim)})
	}
	render.AskNodeAgent(&c)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sts.Namespace, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			NodeName:                     tmpl.NodeName,
			NodeSelector:                 tmpl.NodeSelector,
			Affinity:                     tmpl.Affinity,
			Tolerations:                  tmpl.Tolerations,
			SecurityContext:              render.RestrictedPod(),
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			// disk wait ends at once on SIGTERM.
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers:                    []corev1.Container{c},
			Volumes:                       append(vols, render.NodeAgentVolume()),
		},
	}, nil
}

func claimSource(claim string) corev1.VolumeSource {
	if claim == "" {
		// Staging on the node's disk: neither memory nor the container's
		// root file system holds an image.
		return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	}
	return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
}

// pollInterval is how often the pod's state is read while waiting.
const pollInterval = 250 * time.Millisecond

// cleanupTimeout bounds the pod's deletion, which runs on its own
// context: the command's may be cancelled by then.
const cleanupTimeout = time.Minute

// Run creates pod, waits up to timeout for it to run and hands it to
// use; it deletes the pod after, also when use fails or ctx ends. what
// names the pod's work in errors ("upload", "snapshot"). Callers check
// NoOther first, before they change anything.
func Run(ctx context.Context, c *vmclient.Client, pod *corev1.Pod, what string, timeout time.Duration, log io.Writer, use func(*corev1.Pod) error) (err error) {
	pods := c.Kube.CoreV1().Pods(pod.Namespace)
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{FieldManager: vmclient.FieldManager})
	if err != nil {
		return c.Explain(err)
	}
	defer func() {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if derr := Delete(cleanup, c, created); derr != nil {
			err = errors.Join(err, fmt.Errorf("pod %s/%s: %w; delete it yourself", created.Namespace, created.Name, derr))
		}
	}()
	fmt.Fprintf(log, "pod/%s created; waiting for it to run\n", created.Name)
	running, err := waitRunning(ctx, c, created, what, timeout)
	if err != nil {
		return err
	}
	return use(running)
}

// NoOther waits for a pod of pod's name from an earlier run that is
// being deleted to go, and refuses to run beside one that is not:
// another command uses it.
func NoOther(ctx context.Context, c *vmclient.Client, pod *corev1.Pod, what string) error {
	old, err := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return c.Explain(err)
	case old.DeletionTimestamp == nil:
		return fmt.Errorf("pod %s/%s exists: another %s for vm %s runs, or one ended without deleting it (then: kubectl delete pod -n %s %s)",
			old.Namespace, old.Name, what, old.Labels[vmpod.LabelInstance], old.Namespace, old.Name)
	}
	return waitGone(ctx, c, old)
}

// waitRunning waits until the pod's container runs, or says why it does
// not (unschedulable, the image, a claim that cannot be used).
func waitRunning(ctx context.Context, c *vmclient.Client, pod *corev1.Pod, what string, timeout time.Duration) (*corev1.Pod, error) {
	pods := c.Kube.CoreV1().Pods(pod.Namespace)
	var why string
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Each read on ctx: one cut by the timeout would fail with the
	// client's words, not the timeout's.
	err := wait.PollUntilContextCancel(tctx, pollInterval, true, func(context.Context) (bool, error) {
		got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, c.Explain(err)
		}
		pod = got
		switch pod.Status.Phase {
		case corev1.PodRunning:
			for _, cs := range pod.Status.ContainerStatuses {
				if cs.State.Running != nil {
					return true, nil
				}
			}
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("pod %s/%s ended before the %s (%s): see kubectl describe pod -n %s %s", pod.Namespace, pod.Name, what, pod.Status.Phase, pod.Namespace, pod.Name)
		}
		// The same reasons the VM's own pod fails for; unschedulable
		// may pass (a claim being bound), so it is only said at the end.
		if f := vmstatus.FromPod(pod, true, "").Failed; f.Status == metav1.ConditionTrue {
			if f.Reason != v1.ReasonUnschedulable {
				return false, fmt.Errorf("pod %s/%s: %s", pod.Namespace, pod.Name, f.Message)
			}
			why = ": " + f.Message
		}
		return false, nil
	})
	if err != nil && tctx.Err() != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("pod %s/%s did not run within %s (--timeout)%s", pod.Namespace, pod.Name, timeout, why)
	}
	return pod, err
}

// Delete deletes the pod and waits until it is gone, so that the VM or
// the next command can take its claims at once.
func Delete(ctx context.Context, c *vmclient.Client, pod *corev1.Pod) error {
	err := c.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)},
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return c.Explain(err)
	}
	return waitGone(ctx, c, pod)
}

// waitGone waits until the pod of pod's UID is gone.
func waitGone(ctx context.Context, c *vmclient.Client, pod *corev1.Pod) error {
	pods := c.Kube.CoreV1().Pods(pod.Namespace)
	return wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, c.Explain(err)
		}
		return got.UID != pod.UID, nil
	})
}
