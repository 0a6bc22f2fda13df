// Package console is "kubectl vm console": it opens a VM's SPICE display
// in remote-viewer or, with --browser, in a web browser, with a one-time
// password; or, with --serial, attaches the terminal to the VM's serial
// console.
package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/podexec"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmpod"
)

// Viewer is the SPICE client that the command launches (from virt-viewer).
const Viewer = "remote-viewer"

// Options are the options of the console command.
type Options struct {
	Name string
	// Expiry is how long the password lets a client log in, counted from
	// when the runner applies it; a connected client stays connected.
	Expiry time.Duration
	// Timeout bounds the wait for the runner to apply the password.
	Timeout  time.Duration
	PrintVV  bool
	NoLaunch bool
	// Serial attaches to the serial console instead of the display.
	Serial bool
	// Browser shows the display in a web browser instead of remote-viewer.
	Browser bool

	cmdName     string // "kubectl vm", for hints
	viewer      string // the path of Viewer, when it is launched
	configFlags *genericclioptions.ConfigFlags
	restConfig  *rest.Config
	client      *vmclient.Client
	genericiooptions.IOStreams
}

// NewCmd makes the console command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{cmdName: name, configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "console NAME [--expiry 30s] [--browser] [--print-vv | --no-launch] | console --serial NAME",
		Short: "Open a running VM's SPICE display in remote-viewer or a web browser, or its serial console",
		Long: `Open a running VM's SPICE display in remote-viewer (from virt-viewer) with
a one-time password, or with --browser in a web browser; with --serial,
attach this terminal to the VM's serial console instead.

The command makes a new random password with a short expiry and hands it
to the VM's runner through its pod ("vm-runner display-password", run
through pods/exec, the password on stdin), which sets it at once and says
so. The password lets a client log in for --expiry from then on; a
connected client stays connected. Where pods/exec is refused or the pod
runs an older runner, the command writes the password into the VM's
display Secret instead (labelled ` + vmpod.LabelComponent + `=` + vmpod.ComponentDisplaySecret + `, else
<vm>-display-secret; created when missing) and, with a VirtualMachine,
waits until the runner reports it applied (status.displayPasswordSerial).
A VM's display is locked until then, unless the VM opts out with the
annotation ` + v1.AnnotationDisplayWithoutPassword + `: "true".

The display is reached through the VM's LoadBalancer Service (with
loadBalancerService) once it has an address, else through
spec.vm.display.spice.server and proxyUrl when set, else through a port
forward to the VM's pod via the API server, which stays open while
remote-viewer runs (with --print-vv or --no-launch: until Ctrl-C).

With --browser, the command serves a page with the SPICE HTML5 client
(spice-html5, LGPL-3.0-or-later, built into the command) on 127.0.0.1
only, under a random token in the URL that other users of the machine
do not know, and opens it with the command in $BROWSER, else in the
desktop's default browser; --no-launch prints the URL instead, for a browser elsewhere
(through an SSH tunnel to this port: ssh -L PORT:127.0.0.1:PORT).
The page always reaches the display through a port forward via the API
server, whatever LoadBalancer or proxyUrl the VM has: it needs no more
than the rights of the vm-user role. Its Ctrl-Alt-Del button sends that
key combination; the guest follows the window's size where it runs the
SPICE agent (spice-vdagent). The command ends when the page is closed, or
on Ctrl-C.

The connection file (.vv) is written with mode 0600 into a temporary
directory; remote-viewer deletes it once read.

With --serial, what is typed goes to the guest's first serial port
(ttyS0, COM1) and what the guest writes there comes back; the terminal is
raw, so Ctrl-C and the like are the guest's. Ctrl-] leaves. One client at a
time may type: a second one is refused with the name (user@host) of the
one attached. Any number may watch with "logs --follow". The guest learns
the terminal's size only from stty or resize: a serial line carries none.
Input that is not a terminal (a pipe, a script) works too, and its end
leaves.

The serial console is reached through pods/exec: the command runs
"vm-runner serial --attach" in the runner container, which joins the
runner's console socket. pods/exec, not pods/portforward or pods/attach,
because Kubernetes' standard "edit" and "admin" roles grant it, it passes
API server proxies that carry kubectl exec, and the runner can say in
plain words why it cannot attach. It needs: get on the VirtualMachine (or,
in GitOps mode, the StatefulSet), get on pods, and get and create on
pods/exec (WebSocket, SPDY).`,
		Example: fmt.Sprintf(`  # Open the display of a running VM
  %[1]s console test-vm

  # Print the connection file, to open it elsewhere
  %[1]s console test-vm --print-vv > test-vm.vv

  # Write the connection file and print its path; a password valid for 2 minutes
  %[1]s console test-vm --no-launch --expiry 2m

  # Open the display in the default web browser
  %[1]s console test-vm --browser

  # Print the page's URL instead, to open it in a browser yourself
  %[1]s console test-vm --browser --no-launch

  # Type on the VM's serial console (Ctrl-] leaves)
  %[1]s console --serial test-vm`, name),
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
	cmd.Flags().DurationVar(&o.Expiry, "expiry", 30*time.Second, "how long the password lets a client log in, from when the runner applies it")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 60*time.Second, "how long to wait for the runner to apply the password")
	cmd.Flags().BoolVar(&o.PrintVV, "print-vv", false, "print the connection file to stdout instead of launching "+Viewer)
	cmd.Flags().BoolVar(&o.NoLaunch, "no-launch", false, "write the connection file and print its path instead of launching "+Viewer+" (with --browser: print the page's URL)")
	cmd.Flags().BoolVar(&o.Browser, "browser", false, "show the display in a web browser, with the SPICE HTML5 client built into the command")
	cmd.Flags().BoolVar(&o.Serial, "serial", false, "attach this terminal to the VM's serial console instead (Ctrl-] leaves)")
	return cmd
}

// Complete takes the name and makes the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	if o.restConfig, err = o.configFlags.ToRESTConfig(); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate checks the flags and, before any password is changed, that
// remote-viewer can be launched.
func (o *Options) Validate() error {
	if o.Serial {
		if o.PrintVV || o.NoLaunch || o.Browser {
			return errors.New("--serial: not with --browser, --print-vv or --no-launch, which are about the display")
		}
		return nil
	}
	if o.Browser && o.PrintVV {
		return errors.New("--browser: not with --print-vv: the browser needs no connection file")
	}
	if o.Expiry < time.Second {
		return fmt.Errorf("--expiry %s: must be at least 1s", o.Expiry)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: must be positive", o.Timeout)
	}
	if o.PrintVV || o.NoLaunch || o.Browser {
		return nil
	}
	var err error
	if o.viewer, err = exec.LookPath(Viewer); err != nil {
		return fmt.Errorf("%s not found: install virt-viewer, or use --print-vv / --no-launch", Viewer)
	}
	return nil
}

// Run reaches the display, sets a one-time password and opens the viewer.
func (o *Options) Run(ctx context.Context) error {
	// Ctrl-C ends a port forward and the viewer cleanly.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if o.Serial {
		return o.runSerial(ctx)
	}
	c := o.client
	vm, err := c.Get(ctx, o.Name)
	if err != nil {
		return err
	}
	spice, err := spiceOf(vm)
	if err != nil {
		return err
	}
	pod, err := c.Pod(ctx, vm)
	if err != nil {
		return err
	}
	if !podRunning(pod) {
		return fmt.Errorf("%s is not running: start it with %s start %s", o.Name, o.cmdName, o.Name)
	}
	// Reached before the password is set, so that the password's short
	// life is not spent on the way. The browser's page always goes
	// through the API server: one way, with the vm-user role's rights.
	var ep *endpoint
	if o.Browser {
		ep, err = o.portForward(ctx, pod, *spice.Port)
	} else {
		ep, err = o.endpoint(ctx, vm, pod, spice)
	}
	if err != nil {
		return err
	}
	defer ep.close()
	password, err := o.setPassword(ctx, vm, pod)
	if err != nil {
		return err
	}
	if o.Browser {
		return o.runBrowser(ctx, vm, ep, password)
	}
	vv := connectionFile(ep, password, vm.Namespace+"/"+vm.Name)
	if o.PrintVV {
		_, err := o.Out.Write(vv)
		if err != nil || !ep.forwarded() {
			return err
		}
		return o.holdForward(ctx, ep)
	}
	dir, err := os.MkdirTemp("", "kubectl-vm-console-")
	if err != nil {
		return err
	}
	file := filepath.Join(dir, vm.Name+".vv")
	if err := os.WriteFile(file, vv, 0o600); err != nil {
		return err
	}
	if o.NoLaunch {
		fmt.Fprintln(o.Out, file)
		if !ep.forwarded() {
			return nil
		}
		return o.holdForward(ctx, ep)
	}
	// The viewer deletes the file once read; the directory goes here.
	defer os.RemoveAll(dir)
	viewer := exec.CommandContext(ctx, o.viewer, file)
	viewer.Stdout, viewer.Stderr = o.ErrOut, o.ErrOut
	if err := viewer.Run(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: %w", Viewer, err)
	}
	return nil
}

// spiceOf returns the VM's SPICE settings: the VirtualMachine's, defaulted
// as render does; in GitOps mode only the port, which render put on the
// runner container.
func spiceOf(vm *vmclient.VM) (*v1.Spice, error) {
	if vm.Mode == vmclient.ModeOperator {
		spec := vm.VM.Spec.VM.DeepCopy()
		spec.Default()
		if spec.Display.Spice == nil {
			return nil, fmt.Errorf("%s has no SPICE display (spec.vm.display.spice)", vm.Name)
		}
		return spec.Display.Spice, nil
	}
	for _, ctr := range vm.StatefulSet.Spec.Template.Spec.Containers {
		for _, p := range ctr.Ports {
			if ctr.Name == render.ContainerRunner && p.Name == render.PortSpice {
				return &v1.Spice{Port: &p.ContainerPort}, nil
			}
		}
	}
	return nil, fmt.Errorf("%s has no SPICE display (no port %q on its StatefulSet's runner container)", vm.Name, render.PortSpice)
}

// setPassword makes a new random one-time password for the display and
// hands it to the runner through the VM's pod (vm-runner
// display-password), which sets it at once and says so. Where that is not
// possible (pods/exec refused, a runner older than the command) it writes
// the password into the display Secret instead. "" is no password: the VM
// opted out of the locked display.
func (o *Options) setPassword(ctx context.Context, vm *vmclient.VM, pod *corev1.Pod) (string, error) {
	random := make([]byte, 24)
	if _, err := rand.Read(random); err != nil {
		return "", err
	}
	password := base64.RawURLEncoding.EncodeToString(random)
	expiry := fmt.Sprintf("+%d", int64(math.Ceil(o.Expiry.Seconds())))
	var out bytes.Buffer
	err := podexec.Exec(ctx, o.client.Config, pod, runnerconfig.DisplayPasswordCommand(expiry),
		podexec.Streams{Stdin: strings.NewReader(password + "\n"), Stdout: &out, Stderr: &out})
	var exit *podexec.ExitError
	switch {
	case err == nil:
		return password, nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	case errors.As(err, &exit) && exit.Code == runnerconfig.ExitDisplayWithoutPassword:
		fmt.Fprintf(o.ErrOut, "warning: %s's display runs without a password (annotation %s): whoever reaches its SPICE port gets it\n", vm.Name, v1.AnnotationDisplayWithoutPassword)
		return "", nil
	case errors.As(err, &exit) && exit.Code == runnerconfig.ExitPasswordFailed:
		return "", fmt.Errorf("the runner of %s did not set the display password: %s", vm.Name, strings.TrimSpace(lastLine(out.String())))
	case errors.As(err, &exit):
		fmt.Fprintf(o.ErrOut, "warning: %s's runner is older than this command (restart the VM to update it): setting the password through the display Secret\n", vm.Name)
	default:
		fmt.Fprintf(o.ErrOut, "warning: cannot hand the password to %s's runner through its pod (%v): setting it through the display Secret\n", vm.Name, o.client.Explain(err))
	}
	return password, o.writePassword(ctx, vm, password, expiry)
}

// lastLine is the last non-empty line of s: a command's reason.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// writePassword writes password into the display Secret and, in operator
// mode, waits until the runner has applied it.
func (o *Options) writePassword(ctx context.Context, vm *vmclient.VM, password, expiry string) error {
	c := o.client
	var serial int64
	if vm.Mode == vmclient.ModeOperator {
		serial = vm.VM.Status.DisplayPasswordSerial
	}
	secret, err := o.displaySecret(ctx, vm)
	if err != nil {
		return err
	}
	created := secret.ResourceVersion == ""
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	secret.Data[vmpod.DisplayPasswordFile] = []byte(password)
	secret.Data[vmpod.PasswordExpiryFile] = []byte(expiry)
	secrets := c.Kube.CoreV1().Secrets(vm.Namespace)
	opts := metav1.CreateOptions{FieldManager: vmclient.FieldManager}
	if created {
		secret, err = secrets.Create(ctx, secret, opts)
	} else {
		// The resourceVersion makes a concurrent console fail, not vanish.
		secret, err = secrets.Update(ctx, secret, metav1.UpdateOptions{FieldManager: vmclient.FieldManager})
	}
	if err != nil {
		return c.Explain(err)
	}
	if created {
		// A runner older than the locked display turns ticketing on only
		// when it starts with a password.
		fmt.Fprintf(o.ErrOut, "warning: %s had no display Secret: created %s; a runner older than this command locks its display only from the VM's next start\n", vm.Name, secret.Name)
		return nil
	}
	// The pod's annotation podsync.AnnotationPasswordSerial changes with
	// every new password, so that the kubelet refreshes the Secret in the
	// pod at once.
	c.SyncPod(ctx, vm, podsync.AnnotationPasswordSerial, secret.ResourceVersion, "the new password", o.ErrOut)
	if vm.Mode == vmclient.ModeGitOps {
		fmt.Fprintf(o.ErrOut, "warning: %s/%s has no VirtualMachine (GitOps mode), whose status would confirm the new password: it may take a moment to apply\n", vm.Namespace, vm.Name)
		return nil
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, o.Timeout, true, func(ctx context.Context) (bool, error) {
		obj, err := c.VMs(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
		if err != nil {
			return false, c.Explain(err)
		}
		now, _, _ := unstructured.NestedInt64(obj.Object, "status", "displayPasswordSerial")
		return now > serial, nil
	})
	if err != nil {
		if wait.Interrupted(err) && ctx.Err() == nil {
			return fmt.Errorf("the runner did not apply the new display password within %s (status.displayPasswordSerial stayed %d); see %s status %s", o.Timeout, serial, o.cmdName, vm.Name)
		}
		return err
	}
	return nil
}

// displaySecret finds the VM's display Secret as the operator does: one
// labelled for the VM, preferably with the conventional name, else the one
// with the conventional name. A Secret not found is returned new, with the
// labels, to be created.
func (o *Options) displaySecret(ctx context.Context, vm *vmclient.VM) (*corev1.Secret, error) {
	c := o.client
	secrets := c.Kube.CoreV1().Secrets(vm.Namespace)
	name := render.DisplaySecretName(vm.Name)
	sel := labels.SelectorFromSet(labels.Set{vmpod.LabelInstance: vm.Name, vmpod.LabelComponent: vmpod.ComponentDisplaySecret})
	list, err := secrets.List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, c.Explain(err)
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i], nil
		}
	}
	if len(list.Items) > 0 {
		return &list.Items[0], nil
	}
	secret, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lbl := render.DisplaySecretLabels(vm.Name)
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vm.Namespace, Labels: lbl},
			Type:       corev1.SecretTypeOpaque,
		}, nil
	}
	return secret, c.Explain(err)
}
