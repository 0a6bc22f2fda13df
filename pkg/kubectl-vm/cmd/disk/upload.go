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

	"github.com/vmop/vmop/pkg/kubectl-vm/helperpod"
	"github.com/vmop/vmop/pkg/kubectl-vm/podexec"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerexec"
)

// upload runs the uploader pod, streams file (called name) to the
// receiver in it and deletes the pod.
func (o *Options) upload(ctx context.Context, t *target, file io.Reader, name string) error {
	pod, err := uploaderPod(t)
	if err != nil {
		return err
	}
	if err := helperpod.NoOther(ctx, o.client, pod, "upload"); err != nil {
		return err
	}
	// Where the VM never ran, its claims are made here.
	for _, tmpl := range []string{t.disk, render.VolumeRunnerData} {
		if err := o.ensureClaim(ctx, t.sts, tmpl); err != nil {
			return err
		}
	}
	return helperpod.Run(ctx, o.client, pod, "upload", o.Timeout, o.ErrOut, func(pod *corev1.Pod) error {
		return o.receive(ctx, t, pod, file, name)
	})
}

// receive streams file to the receiver in the uploader pod.
func (o *Options) receive(ctx context.Context, t *target, pod *corev1.Pod, file io.Reader, name string) error {
	// Asked first, so that a disk that needs --force is refused before
	// the image is sent: the receiver reads all of it in any case.
	var stderr bytes.Buffer
	err := podexec.Exec(ctx, o.client.Config, pod, append(receiveCommand(t, name, o.size, o.Force), "--check"), podexec.Streams{Stderr: &stderr})
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
	said := strings.TrimPrefix(strings.TrimSpace(stderr), runnerexec.ReceiveName+": ")
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit) && said != "":
		return fmt.Errorf("vm %s/%s (claim %s): %s", t.vm.Namespace, t.vm.Name, t.claim, said)
	case errors.As(err, &exit):
		return fmt.Errorf("vm %s/%s (claim %s): %s ended with exit code %d", t.vm.Namespace, t.vm.Name, t.claim, runnerexec.ReceiveName, exit.Code)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("vm %s/%s: the upload to disk %s was interrupted; run it again to finish it", t.vm.Namespace, t.vm.Name, t.disk)
	}
	return fmt.Errorf("vm %s/%s: the upload to disk %s: %w", t.vm.Namespace, t.vm.Name, t.disk, o.client.Explain(err))
}
