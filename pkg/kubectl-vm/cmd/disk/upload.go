package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/podexec"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/vm-runner/diskupload"
	"github.com/vmop/vmop/pkg/vmstatus"
)

// pollInterval is how often the pod's state is read while waiting.
const pollInterval = 250 * time.Millisecond

// cleanupTimeout bounds the deletion of the pod after the upload, which
// runs on its own context: the command's may be cancelled by then.
const cleanupTimeout = time.Minute

// upload runs the uploader pod, streams file (called name) to the
// receiver in it and deletes the pod.
func (o *Options) upload(ctx context.Context, t *target, file io.Reader, name string) (err error) {
	pod, err := uploaderPod(t)
	if err != nil {
		return err
	}
	pods := o.client.Kube.CoreV1().Pods(pod.Namespace)
	if err := o.noUploader(ctx, pod); err != nil {
		return err
	}
	// Where the VM never ran, its claims are made here.
	for _, tmpl := range []string{t.disk, render.VolumeRunnerData} {
		if err := o.ensureClaim(ctx, t.sts, tmpl); err != nil {
			return err
		}
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{FieldManager: vmclient.FieldManager})
	if err != nil {
		return o.client.Explain(err)
	}
	defer func() {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if derr := o.deletePod(cleanup, created); derr != nil {
			err = errors.Join(err, fmt.Errorf("pod %s/%s: %w; delete it yourself", created.Namespace, created.Name, derr))
		}
	}()
	fmt.Fprintf(o.ErrOut, "pod/%s created; waiting for it to run\n", created.Name)
	if pod, err = o.waitRunning(ctx, created); err != nil {
		return err
	}
	// Asked first, so that a disk that needs --force is refused before
	// the image is sent: the receiver reads all of it in any case.
	var stderr bytes.Buffer
	err = podexec.Exec(ctx, o.client.Config, pod, append(receiveCommand(t, name, o.size, o.Force), "--check"), podexec.Streams{Stderr: &stderr})
	if err = o.receiverError(t, err, stderr.String()); err != nil {
		return err
	}
	p := newProgress(o.ErrOut, name, o.size)
	stderr.Reset()
	start := time.Now()
	err = podexec.Exec(ctx, o.client.Config, pod, receiveCommand(t, name, o.size, o.Force), podexec.Streams{
		Stdin:  p.reader(file),
		Stdout: p.lines(),
		Stderr: &stderr,
	})
	p.end()
	if err = o.receiverError(t, err, stderr.String()); err != nil {
		return err
	}
	elapsed := time.Since(start)
	fmt.Fprintf(o.Out, "disk %s of vm %s/%s (claim %s): %s uploaded in %s (%s/s)\n", t.disk, t.vm.Namespace, t.vm.Name, t.claim,
		name, elapsed.Round(100*time.Millisecond), mib(float64(o.size)/elapsed.Seconds()))
	return nil
}

// receiverError explains how the receiver ended: what it said on
// stderr (e.g. that the disk holds data) with the VM and claim it says it
// of.
func (o *Options) receiverError(t *target, err error, stderr string) error {
	var exit *podexec.ExitError
	said := strings.TrimPrefix(strings.TrimSpace(stderr), diskupload.ReceiveName+": ")
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit) && said != "":
		return fmt.Errorf("vm %s/%s (claim %s): %s", t.vm.Namespace, t.vm.Name, t.claim, said)
	case errors.As(err, &exit):
		return fmt.Errorf("vm %s/%s (claim %s): %s ended with exit code %d", t.vm.Namespace, t.vm.Name, t.claim, diskupload.ReceiveName, exit.Code)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("vm %s/%s: the upload to disk %s was interrupted; run it again to finish it", t.vm.Namespace, t.vm.Name, t.disk)
	}
	return fmt.Errorf("vm %s/%s: the upload to disk %s: %w", t.vm.Namespace, t.vm.Name, t.disk, o.client.Explain(err))
}

// noUploader waits for an uploader pod of an earlier upload that is
// being deleted to go, and refuses to run beside one that is not.
func (o *Options) noUploader(ctx context.Context, pod *corev1.Pod) error {
	pods := o.client.Kube.CoreV1().Pods(pod.Namespace)
	old, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return o.client.Explain(err)
	case old.DeletionTimestamp == nil:
		return fmt.Errorf("pod %s/%s exists: another upload to vm %s runs, or one ended without deleting it (then: kubectl delete pod -n %s %s)",
			old.Namespace, old.Name, old.Labels[render.LabelInstance], old.Namespace, old.Name)
	}
	return o.waitGone(ctx, old)
}

// waitRunning waits until the pod's container runs, or says why it does
// not (unschedulable, the image, a claim that cannot be used).
func (o *Options) waitRunning(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pods := o.client.Kube.CoreV1().Pods(pod.Namespace)
	var why string
	timeout, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	// Each read on ctx: one cut by the timeout would fail with the
	// client's words, not the timeout's.
	err := wait.PollUntilContextCancel(timeout, pollInterval, true, func(context.Context) (bool, error) {
		got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, o.client.Explain(err)
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
			return false, fmt.Errorf("pod %s/%s ended before the upload (%s): see kubectl describe pod -n %s %s", pod.Namespace, pod.Name, pod.Status.Phase, pod.Namespace, pod.Name)
		}
		// The same reasons the VM's own pod fails for; unschedulable
		// may pass (a claim being bound), so it is only said at the end.
		if c := vmstatus.FromPod(pod, true, "").Failed; c.Status == metav1.ConditionTrue {
			if c.Reason != v1.ReasonUnschedulable {
				return false, fmt.Errorf("pod %s/%s: %s", pod.Namespace, pod.Name, c.Message)
			}
			why = ": " + c.Message
		}
		return false, nil
	})
	if err != nil && timeout.Err() != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("pod %s/%s did not run within %s (--timeout)%s", pod.Namespace, pod.Name, o.Timeout, why)
	}
	return pod, err
}

// deletePod deletes the pod and waits until it is gone, so that the VM
// or the next upload can take the disk at once.
func (o *Options) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := o.client.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)},
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return o.client.Explain(err)
	}
	return o.waitGone(ctx, pod)
}

// waitGone waits until the pod of pod's UID is gone.
func (o *Options) waitGone(ctx context.Context, pod *corev1.Pod) error {
	pods := o.client.Kube.CoreV1().Pods(pod.Namespace)
	return wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, o.client.Explain(err)
		}
		return got.UID != pod.UID, nil
	})
}
