// Package state is "kubectl vm start", "stop" and "restart": they change
// whether VMs run (in operator mode by the VirtualMachine's spec.vm.state,
// in GitOps mode by the StatefulSet's replicas) and can wait until the
// VMs got there. The three differ only in the action, so they share one
// Options type.
package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/vmstatus"
)

// action is what a command does to each VM.
type action string

const (
	actionStart   action = "start"
	actionStop    action = "stop"
	actionRestart action = "restart"
)

// Options are the options of start, stop and restart.
type Options struct {
	Names       []string
	Wait        bool
	Timeout     time.Duration
	GracePeriod int64 // stop only, in seconds; -1 keeps powerdownTimeout

	action      action
	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	// poll is how often --wait looks; tests shorten it.
	poll time.Duration
	genericiooptions.IOStreams
}

// NewStartCmd makes "start".
func NewStartCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd, _ := newCmd(actionStart, configFlags, streams, &cobra.Command{
		Use:   "start NAME...",
		Short: "Start virtual machines",
		Long: `Start virtual machines: set spec.vm.state to Running, or without a
VirtualMachine (GitOps mode) scale the VM's StatefulSet to 1, which the next
sync from Git undoes. Starting a running VM changes nothing.`,
		Example: fmt.Sprintf(`  # Start a VM and wait until it runs
  %[1]s start test-vm --wait

  # Start several VMs in another namespace
  %[1]s start -n lab vm1 vm2`, name),
	})
	return cmd
}

// NewStopCmd makes "stop".
func NewStopCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd, o := newCmd(actionStop, configFlags, streams, &cobra.Command{
		Use:   "stop NAME...",
		Short: "Stop virtual machines (the guest shuts down)",
		Long: `Stop virtual machines: set spec.vm.state to Stopped, or without a
VirtualMachine (GitOps mode) scale the VM's StatefulSet to 0. The guest gets
powerdownTimeout seconds to shut down, or --grace-period seconds for this
stop only (then qemu is ended). Stopping a stopped VM is not an error.`,
		Example: fmt.Sprintf(`  # Stop a VM and wait until it is down
  %[1]s stop test-vm --wait

  # Give the guest only 30 seconds this time
  %[1]s stop test-vm --grace-period 30`, name),
	})
	cmd.Flags().Int64Var(&o.GracePeriod, "grace-period", -1, "seconds the guest gets to shut down, for this stop only (default: the VM's powerdownTimeout)")
	return cmd
}

// NewRestartCmd makes "restart".
func NewRestartCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd, _ := newCmd(actionRestart, configFlags, streams, &cobra.Command{
		Use:   "restart NAME...",
		Short: "Restart running virtual machines with their current spec",
		Long: `Restart running virtual machines: their pod is deleted, so the guest shuts
down, and the StatefulSet makes a new pod from the current spec, which
applies the changes that need a restart. It works in both modes and leaves
the desired state as it is.`,
		Example: fmt.Sprintf(`  # Apply a changed maximumRam
  %[1]s restart test-vm --wait`, name),
	})
	return cmd
}

func newCmd(a action, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, cmd *cobra.Command) (*cobra.Command, *Options) {
	o := &Options{action: a, configFlags: configFlags, IOStreams: streams, poll: time.Second}
	cmd.Args = cobra.MinimumNArgs(1)
	cmd.ValidArgsFunction = completion.VMNames(configFlags)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := o.Complete(args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "wait until every VM got there, showing its progress")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 5*time.Minute, "how long --wait waits")
	return cmd, o
}

// Set starts (running) or stops the VM name and waits up to timeout until
// it runs or is stopped, as start and stop --wait do, telling streams:
// what restore and clone do around their copies.
func Set(ctx context.Context, c *vmclient.Client, streams genericiooptions.IOStreams, name string, running bool, timeout time.Duration) error {
	a := actionStop
	if running {
		a = actionStart
	}
	o := &Options{action: a, Names: []string{name}, Wait: true, Timeout: timeout, GracePeriod: -1, client: c, poll: time.Second, IOStreams: streams}
	return o.Run(ctx)
}

// Complete makes the client.
func (o *Options) Complete(names []string) error {
	o.Names = names
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %v", o.Timeout)
	}
	if o.GracePeriod < -1 {
		return fmt.Errorf("--grace-period must be 0 or more seconds, not %d", o.GracePeriod)
	}
	return nil
}

// Run acts on each VM, then waits for all. An error about one VM does not
// keep the others from being acted on; the first error is returned.
func (o *Options) Run(ctx context.Context) error {
	var errs []error
	var acted []actedOn
	for _, name := range o.Names {
		a, err := o.act(ctx, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		acted = append(acted, a)
	}
	if o.Wait {
		ctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		for _, a := range acted {
			if err := o.wait(ctx, a); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// actedOn is a VM acted on, for --wait.
type actedOn struct {
	vm *vmclient.VM
	// oldPod is the pod a restart deleted: the VM runs again in another.
	oldPod types.UID
}

func (o *Options) act(ctx context.Context, name string) (actedOn, error) {
	c := o.client
	vm, err := c.Get(ctx, name)
	if err != nil {
		return actedOn{}, err
	}
	a := actedOn{vm: vm}
	running := IsRunning(vm)
	switch {
	case o.action == actionRestart:
		if !running {
			return actedOn{}, fmt.Errorf("%s is not running; use start", name)
		}
		// The StatefulSet (OnDelete) makes the pod anew from its template.
		// The pod is known before it goes, so that --wait does not take
		// its successor (made within milliseconds) for it.
		var pod *corev1.Pod
		if pod, err = c.Pod(ctx, vm); err == nil && pod != nil {
			a.oldPod = pod.UID
			err = c.Explain(c.Kube.CoreV1().Pods(vm.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}))
		}
	case o.action == actionStart && vm.Mode == vmclient.ModeOperator:
		if running {
			fmt.Fprintf(o.Out, "%s is already running\n", name)
			return a, nil
		}
		err = c.PatchSpec(ctx, vm, map[string]any{"state": v1.StateRunning})
	case o.action == actionStop && vm.Mode == vmclient.ModeOperator:
		if running {
			err = c.PatchSpec(ctx, vm, map[string]any{"state": v1.StateStopped})
		}
	default: // GitOps mode
		replicas := int32(0)
		if o.action == actionStart {
			replicas = 1
		}
		if (replicas == 1) == running {
			fmt.Fprintf(o.Out, "%s is already %s\n", name, stateWord(running))
			return a, nil
		}
		err = c.Scale(ctx, vm, replicas)
		if err == nil {
			fmt.Fprintf(o.ErrOut, vmclient.GitOpsWarning+"\n", vm.Namespace, name)
		}
	}
	if err != nil {
		return actedOn{}, err
	}
	if o.action == actionStop {
		if !running {
			fmt.Fprintf(o.Out, "%s is already stopped\n", name)
			return a, nil
		}
		if err := o.shortenGrace(ctx, vm); err != nil {
			return actedOn{}, err
		}
	}
	fmt.Fprintf(o.Out, "%s %s\n", name, pastTense[o.action])
	return a, nil
}

var pastTense = map[action]string{actionStart: "started", actionStop: "stopping", actionRestart: "restarting"}

func stateWord(running bool) string {
	if running {
		return "running"
	}
	return "stopped"
}

// IsRunning tells whether the VM is meant to run.
func IsRunning(vm *vmclient.VM) bool {
	if vm.Mode == vmclient.ModeOperator {
		return vm.VM.Spec.VM.State == v1.StateRunning
	}
	return vm.StatefulSet.Spec.Replicas != nil && *vm.StatefulSet.Spec.Replicas > 0
}

// shortenGrace deletes the pod with --grace-period: the kubelet then ends
// the runner (and qemu with it) after that many seconds. The state was
// changed first, so the StatefulSet does not make a new pod; a deletion
// it started already is only shortened.
func (o *Options) shortenGrace(ctx context.Context, vm *vmclient.VM) error {
	if o.GracePeriod < 0 {
		return nil
	}
	err := o.client.Kube.CoreV1().Pods(vm.Namespace).Delete(ctx, vm.Name+"-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(o.GracePeriod)})
	if err != nil && !apierrors.IsNotFound(err) {
		return o.client.Explain(err)
	}
	return nil
}

// wait polls the VM until it is where the action leads, printing each new
// phase on a line of its own.
func (o *Options) wait(ctx context.Context, a actedOn) error {
	var (
		last    string
		vm      = a.vm
		started = time.Now()
	)
	for {
		phase, done, err := o.phase(ctx, vm, a.oldPod)
		if err != nil {
			return err
		}
		if phase != last {
			fmt.Fprintf(o.Out, "%s: %s (%s)\n", vm.Name, phase, time.Since(started).Round(time.Second))
			last = phase
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not done after --timeout %v: %s", vm.Name, o.Timeout, last)
		case <-time.After(o.poll):
		}
	}
}

// phase tells where the VM is and whether the action is done: by the
// operator's Running condition in operator mode, else by the pod. Done
// means Running (or Stopped) as such: a VM whose pod is ending is still
// "running" until it is gone. After a restart the new pod must run too:
// the condition may still tell of the old one.
func (o *Options) phase(ctx context.Context, vm *vmclient.VM, oldPod types.UID) (string, bool, error) {
	wantRunning := o.action != actionStop
	pod, err := o.client.Pod(ctx, vm)
	if err != nil {
		return "", false, err
	}
	if oldPod != "" && pod != nil && pod.UID == oldPod {
		return "Stopping", false, nil
	}
	if vm.Mode == vmclient.ModeOperator {
		cur, err := o.client.Get(ctx, vm.Name)
		if err != nil {
			return "", false, err
		}
		if st, ok := condition(cur, v1.ConditionRunning); ok && (oldPod == "" || pod != nil) {
			want := v1.ReasonStopped
			if wantRunning {
				want = v1.ReasonRunning
			}
			done := st.Reason == want && st.ObservedGeneration >= cur.Object.GetGeneration() &&
				(oldPod == "" || pod.Status.Phase == corev1.PodRunning)
			failed, _ := condition(cur, v1.ConditionFailed)
			phase := st.Reason
			// An import's progress, as vm-runner import writes it.
			if imp, ok := condition(cur, v1.ConditionImported); ok && !done && imp.Status == metav1.ConditionFalse && imp.Reason == v1.ReasonImporting {
				phase += ", " + strings.TrimSuffix(imp.Message, ".")
			}
			return withFailure(phase, failed, done), done, nil
		}
	}
	// GitOps mode: what the operator would say of the pod.
	c := vmstatus.FromPod(pod, wantRunning, "")
	done := (c.Running.Status == metav1.ConditionTrue) == wantRunning && (wantRunning || pod == nil)
	return withFailure(c.Running.Reason, c.Failed, done), done, nil
}

// withFailure adds to a phase what keeps the VM from getting on (no node
// or volume for its pod, an image the node cannot pull, a runner that
// keeps failing), so that --wait shows it rather than only "Starting"
// until its timeout. Such a failure may pass (a claim binds), so the wait
// goes on.
func withFailure(phase string, failed metav1.Condition, done bool) string {
	if done || failed.Status != metav1.ConditionTrue {
		return phase
	}
	return phase + ", " + failed.Reason + ": " + failed.Message
}

// condition is the operator's condition typ of the VM.
func condition(vm *vmclient.VM, typ string) (metav1.Condition, bool) {
	for _, c := range vm.VM.Status.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return metav1.Condition{}, false
}
