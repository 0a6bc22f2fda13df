// Package portforward is "kubectl vm port-forward": it forwards local
// ports to TCP ports of a VM's guest, or its own stdin and stdout to one
// (--stdio, ssh's ProxyCommand).
//
// Each connection runs "vm-runner connect" in the VM's runner container
// through pods/exec, which reaches the guest from the pod: through a host
// forward of qemu's user network, or at the address the guest agent
// reports for a guest on a tap network. Unlike pods/portforward, that
// needs no port of the pod and reaches the guest itself, and it goes
// through every API server proxy that kubectl exec goes through.
package portforward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/podexec"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
)

// Port is a local port forwarded to a port of the guest; Local 0 is any
// free port.
type Port struct {
	Local, Guest int
}

// ParsePort reads a port argument: [LOCAL:]GUEST, where ":GUEST" and
// "0:GUEST" pick a free local port and "GUEST" alone uses the same number
// locally, as kubectl port-forward does.
func ParsePort(arg string) (Port, error) {
	local, guest, pair := strings.Cut(arg, ":")
	if !pair {
		guest = local
	}
	var p Port
	var err error
	if p.Guest, err = portNumber(guest, 1); err != nil {
		return Port{}, fmt.Errorf("port %q: guest port %w", arg, err)
	}
	if pair && local == "" {
		return p, nil
	}
	if p.Local, err = portNumber(local, 0); err != nil {
		return Port{}, fmt.Errorf("port %q: local port %w", arg, err)
	}
	return p, nil
}

// ParseGuestPort reads a guest port (--stdio, ssh's --port).
func ParseGuestPort(s string) (int, error) { return portNumber(s, 1) }

// portNumber reads a port number from min (0 or 1) to 65535.
func portNumber(s string, min int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < min || n > 65535 {
		return 0, fmt.Errorf("%q: must be a number from %d to 65535", s, min)
	}
	return n, nil
}

// ConnectCommand is what runs in the runner container for a connection
// to guest port port.
func ConnectCommand(port int) []string {
	return []string{"vm-runner", "connect", "--port", strconv.Itoa(port)}
}

// Options are the options of the port-forward command.
type Options struct {
	Name      string
	Ports     []Port
	Addresses []string
	// Stdio is the guest port that stdin and stdout are forwarded to
	// (--stdio); 0 to listen on Ports.
	Stdio int

	stdio       string // --stdio as given
	configFlags *genericclioptions.ConfigFlags
	restConfig  *rest.Config
	client      *vmclient.Client
	genericiooptions.IOStreams
	// outMu keeps the lines of concurrent connections whole.
	outMu sync.Mutex
}

// NewCmd makes the port-forward command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "port-forward NAME [LOCAL:]GUEST... | port-forward --stdio GUEST NAME",
		Short: "Forward local ports to TCP ports of a VM's guest",
		Long: `Forward local ports to TCP ports of a running VM's guest, as kubectl
port-forward does for pods. LOCAL:GUEST listens on LOCAL, ":GUEST" or
"0:GUEST" on a free port (printed), "GUEST" alone on the same number.

Every connection runs "vm-runner connect" in the VM's runner container
(pods/exec), which reaches the guest from its pod: on qemu's user network
through a host forward that the runner keeps while the connection lasts,
on a tap network at the address the guest agent reports.

With --stdio GUEST, stdin and stdout are the connection, once: for ssh's
ProxyCommand (kubectl vm ssh uses it).

Needs the rights to get the VM (virtualmachines, statefulsets), to get
pods and to get and create pods/exec in its namespace.`,
		Example: fmt.Sprintf(`  # The guest's port 80 on local port 8080, until Ctrl-C
  %[1]s port-forward test-vm 8080:80

  # Guest ports 22 and 5432 on free local ports, on all local addresses
  %[1]s port-forward test-vm :22 :5432 --address 0.0.0.0

  # ssh through the VM's pod by hand (what %[1]s ssh does)
  ssh -o ProxyCommand='%[1]s port-forward --stdio 22 test-vm' user@test-vm`, name),
		ValidArgsFunction: completion.VMName(configFlags),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringSliceVar(&o.Addresses, "address", []string{"127.0.0.1"}, "local IP addresses to listen on (comma-separated); localhost is 127.0.0.1")
	cmd.Flags().StringVar(&o.stdio, "stdio", "", "forward stdin and stdout to this guest port, once, instead of listening")
	_ = cmd.RegisterFlagCompletionFunc("address", cobra.FixedCompletions([]string{"127.0.0.1", "0.0.0.0", "::1", "::"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("stdio", cobra.NoFileCompletions)
	return cmd
}

// Complete takes the name, the ports and --stdio, and makes the client.
func (o *Options) Complete(cmd *cobra.Command, args []string) error {
	if err := o.parseArgs(cmd.Flags().Changed("stdio"), args); err != nil {
		return err
	}
	var err error
	if o.restConfig, err = o.configFlags.ToRESTConfig(); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// parseArgs reads the arguments and --stdio (stdio: it was given).
func (o *Options) parseArgs(stdio bool, args []string) error {
	if len(args) == 0 {
		return errors.New("a VM name is required")
	}
	o.Name = args[0]
	if stdio {
		if len(args) > 1 {
			return fmt.Errorf("--stdio %s: takes no port arguments, got %q", o.stdio, args[1])
		}
		p, err := ParseGuestPort(o.stdio)
		if err != nil {
			return fmt.Errorf("--stdio %w", err)
		}
		o.Stdio = p
		return nil
	}
	if len(args) == 1 {
		return errors.New("at least one port is required: [LOCAL:]GUEST")
	}
	var errs []error
	for _, a := range args[1:] {
		p, err := ParsePort(a)
		errs = append(errs, err)
		o.Ports = append(o.Ports, p)
	}
	return errors.Join(errs...)
}

// Validate checks the addresses.
func (o *Options) Validate() error {
	if o.Stdio != 0 {
		return nil
	}
	if len(o.Addresses) == 0 {
		return errors.New("--address: at least one address is required")
	}
	for i, a := range o.Addresses {
		if a == "localhost" {
			o.Addresses[i] = "127.0.0.1"
			continue
		}
		if net.ParseIP(a) == nil {
			return fmt.Errorf("--address %q: not an IP address", a)
		}
	}
	return nil
}

// Run finds the VM's running pod and forwards.
func (o *Options) Run(ctx context.Context) error {
	_, pod, err := podexec.Running(ctx, o.client, o.Name)
	if err != nil {
		return err
	}
	if o.Stdio != 0 {
		return o.forward(ctx, pod, o.Stdio, o.In, o.Out)
	}
	// serve reports how each connection ended; client-go's log of the
	// streams it was still copying when one closed ("Copying stdin
	// failed") only repeats that in worse words.
	utilruntime.ErrorHandlers = nil
	// Ctrl-C ends the forwarding, and the connections with it.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	listeners, err := o.listen()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, l := range listeners {
		wg.Go(func() { o.serve(ctx, pod, l) })
	}
	<-ctx.Done()
	for _, l := range listeners {
		l.Close()
	}
	wg.Wait()
	return nil
}

// listener is a local listener and the guest port it forwards to.
type listener struct {
	net.Listener
	port Port
}

// listen listens on every address for every port; a port picked freely
// on the first address is used on the others, so that one number stands
// for one guest port.
func (o *Options) listen() ([]listener, error) {
	var listeners []listener
	fail := func(err error) ([]listener, error) {
		for _, l := range listeners {
			l.Close()
		}
		return nil, err
	}
	for _, p := range o.Ports {
		for _, a := range o.Addresses {
			l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(p.Local)))
			if err != nil {
				return fail(fmt.Errorf("cannot listen for guest port %d: %w", p.Guest, err))
			}
			p.Local = l.Addr().(*net.TCPAddr).Port
			listeners = append(listeners, listener{Listener: l, port: p})
			o.printf(o.Out, "Forwarding from %s -> %d\n", l.Addr(), p.Guest)
		}
	}
	return listeners, nil
}

// serve forwards the connections that l accepts until it is closed.
func (o *Options) serve(ctx context.Context, pod *corev1.Pod, l listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				o.printf(o.ErrOut, "error: %v\n", err)
			}
			return
		}
		wg.Go(func() {
			defer conn.Close()
			o.printf(o.Out, "Handling connection for %d\n", l.port.Local)
			if err := o.forward(ctx, pod, l.port.Guest, conn, conn); err != nil && ctx.Err() == nil {
				o.printf(o.ErrOut, "error: %v\n", err)
			}
		})
	}
}

// forward runs vm-runner connect for guest port port, with in and out as
// its stdin and stdout. Its error names the VM and tells what the runner
// said.
func (o *Options) forward(ctx context.Context, pod *corev1.Pod, port int, in io.Reader, out io.Writer) error {
	var stderr bytes.Buffer
	err := podexec.Exec(ctx, o.restConfig, pod, ConnectCommand(port), podexec.Streams{Stdin: in, Stdout: out, Stderr: &stderr})
	if err == nil {
		return nil
	}
	if said := runnerSaid(stderr.String()); said != "" {
		return fmt.Errorf("%s: %s", o.Name, said)
	}
	return fmt.Errorf("%s: guest port %d: %w", o.Name, port, err)
}

// runnerSaid is the last line that vm-runner connect wrote on stderr,
// without its program name: the user asked kubectl, not vm-runner.
func runnerSaid(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	return strings.TrimPrefix(lines[len(lines)-1], "vm-runner connect: ")
}

func (o *Options) printf(w io.Writer, format string, args ...any) {
	o.outMu.Lock()
	defer o.outMu.Unlock()
	fmt.Fprintf(w, format, args...)
}
