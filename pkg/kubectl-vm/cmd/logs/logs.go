// Package logs is "kubectl vm logs": what a VM's guest wrote on its serial
// console, as the runner keeps it.
package logs

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/podexec"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/runnerexec"
)

// Options are the options of the logs command.
type Options struct {
	Name   string
	Follow bool

	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	genericiooptions.IOStreams
}

// NewCmd makes the logs command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "logs NAME [-f]",
		Short: "Print what a running VM's guest wrote on its serial console",
		Long: `Print what a running VM's guest wrote on its serial console (ttyS0,
COM1): the boot messages, a login prompt, a kernel's last words. The runner
keeps the last 128 to 256 KiB of it while the VM runs; with --follow, new
output follows as it comes, until Ctrl-C. To type on the console: console
--serial. (kubectl logs of the VM's pod shows the runner's own log, and the
guest's lines too when spec.vm.serialConsole.podLog is true.)

The output is read through pods/exec: the command runs "vm-runner serial"
in the runner container, which reads the runner's console socket. pods/exec,
not pods/log, because the console's output is not the runner's log (and is
kept even without podLog); pods/exec rather than pods/portforward or
pods/attach, because Kubernetes' standard "edit" and "admin" roles grant
it and it passes API server proxies that carry kubectl exec. It needs: get
on the VirtualMachine (or, in GitOps mode, the StatefulSet), get on pods,
and get and create on pods/exec (WebSocket, SPDY).`,
		Example: fmt.Sprintf(`  # What the guest wrote since it booted (the last 128-256 KiB)
  %[1]s logs test-vm

  # And then what it writes, until Ctrl-C
  %[1]s logs test-vm -f`, name),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.VMName(configFlags),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "after the kept output, print new output as it comes, until Ctrl-C")
	return cmd
}

// Complete takes the name and makes the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate has nothing to check beyond cobra's argument count.
func (o *Options) Validate() error { return nil }

// Run prints the output through vm-runner serial in the VM's pod.
func (o *Options) Run(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	vm, pod, err := podexec.Running(ctx, o.client, o.Name)
	if err != nil {
		return err
	}
	mode := runnerexec.ModeHistory
	streams := podexec.Streams{Stdout: o.Out}
	if o.Follow {
		// The follower in the pod ends when its stdin does, which is when
		// this connection ends.
		mode = runnerexec.ModeFollow
		streams.Stdin = untilDone(ctx)
	}
	var stderr limitedBuffer
	streams.Stderr = &stderr
	err = podexec.Exec(ctx, o.client.Config, pod, runnerexec.Command(mode, ""), streams)
	switch {
	case ctx.Err() != nil: // Ctrl-C ends --follow
		return nil
	case err == nil:
		return nil
	case stderr.String() != "":
		return fmt.Errorf("vm %s/%s: %w", vm.Namespace, vm.Name, runnerexec.CommandError(stderr.String()))
	}
	return fmt.Errorf("vm %s/%s: serial console: %w", vm.Namespace, vm.Name, err)
}

// untilDone is a reader with nothing to read that ends when ctx does.
func untilDone(ctx context.Context) io.Reader {
	r, w := io.Pipe()
	go func() {
		<-ctx.Done()
		w.Close()
	}()
	return r
}

// limitedBuffer keeps the start of vm-runner's error output, for the
// error message.
type limitedBuffer struct {
	mu sync.Mutex
	b  []byte
}

const maxStderr = 16 << 10

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p[:min(len(p), maxStderr-len(l.b))]...)
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
