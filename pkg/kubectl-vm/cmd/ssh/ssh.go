// Package ssh is "kubectl vm ssh": it runs the user's own ssh client
// with "kubectl vm port-forward --stdio" as its ProxyCommand, so that the
// user's keys, agent, config and options all apply, and the connection
// goes through the API server to the VM's pod and on to the guest.
package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/portforward"
	"github.com/vmop/vmop/pkg/kubectl-vm/podexec"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
)

// Client is the ssh client that the command runs, found on PATH.
const Client = "ssh"

// ExitError ends kubectl vm with ssh's exit code, which ssh has
// explained already (or which is the remote command's).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return "ssh exited with " + strconv.Itoa(e.Code) }

// Options are the options of the ssh command.
type Options struct {
	// User and Name are from [USER@]NAME; User may come from -l instead.
	User, Name string
	Port       string
	Identity   string
	SSHOptions []string
	// Command runs in the guest instead of a login shell.
	Command []string

	cmdName   string
	ssh       string // the path of Client
	self      string // this program, for the ProxyCommand
	namespace string
	// kubeFlags are the kubectl flags given (but -n), for the
	// ProxyCommand: it reaches the same cluster as the same user.
	kubeFlags   []string
	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	// stdin is the process's own: ssh needs the terminal, not a buffered
	// copy of it.
	stdin io.Reader
	genericiooptions.IOStreams
}

// NewCmd makes the ssh command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{cmdName: name, configFlags: configFlags, IOStreams: streams, stdin: os.Stdin}
	cmd := &cobra.Command{
		Use:   "ssh [USER@]NAME [-i IDENTITY] [-p PORT] [-l USER] [-o OPTION]... [-- COMMAND...]",
		Short: "Log in to a VM's guest with ssh, through the VM's pod",
		Long: `Log in to a running VM's guest with your own ssh client, or run COMMAND
there: ssh (from PATH) runs with "` + name + ` port-forward --stdio PORT NAME" as
its ProxyCommand, so the connection goes through the API server and the
VM's pod to the guest's SSH server (see port-forward), whatever network
the guest is on. Your keys, agent and ~/.ssh/config apply as usual;
-i, -l and -o are passed to ssh.

The guest's host key is kept in known_hosts under the name vm.NAME.NAMESPACE
(HostKeyAlias), one entry per VM, and the same name is the host ssh is
given, so that "Host vm.*" blocks of ~/.ssh/config match. The command
exits with ssh's exit code (the remote command's, or 255).

Needs what port-forward needs: get on the VM (virtualmachines,
statefulsets) and pods, get and create on pods/exec.`,
		Example: fmt.Sprintf(`  # Log in as debian
  %[1]s ssh debian@test-vm

  # Run a command with a key, on a guest whose sshd listens on port 2222
  %[1]s ssh -i ~/.ssh/id_ed25519 -p 2222 debian@test-vm -- uptime

  # Any ssh option
  %[1]s ssh -o StrictHostKeyChecking=accept-new -l root test-vm`, name),
		ValidArgsFunction: vmTarget(configFlags),
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
	cmd.Flags().StringVarP(&o.Identity, "identity", "i", "", "the identity (private key) file ssh uses (ssh -i)")
	cmd.Flags().StringVarP(&o.Port, "port", "p", "22", "the guest's SSH port")
	cmd.Flags().StringVarP(&o.User, "login-name", "l", "", "the user to log in as in the guest (ssh -l), instead of USER@")
	cmd.Flags().StringArrayVarP(&o.SSHOptions, "option", "o", nil, "an ssh option, as ssh -o takes it (repeatable)")
	_ = cmd.RegisterFlagCompletionFunc("port", cobra.NoFileCompletions)
	_ = cmd.RegisterFlagCompletionFunc("login-name", cobra.NoFileCompletions)
	_ = cmd.RegisterFlagCompletionFunc("option", cobra.NoFileCompletions)
	return cmd
}

// vmTarget completes [USER@]NAME: VM names, after the USER@ being typed.
func vmTarget(configFlags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	names := completion.VMName(configFlags)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		user, name, ok := strings.Cut(toComplete, "@")
		if !ok {
			return names(cmd, args, toComplete)
		}
		got, directive := names(cmd, args, name)
		for i := range got {
			got[i] = user + "@" + got[i]
		}
		return got, directive
	}
}

// Complete reads the arguments, finds ssh and this program, and makes
// the client.
func (o *Options) Complete(cmd *cobra.Command, args []string) error {
	if err := o.parseArgs(args, cmd.ArgsLenAtDash()); err != nil {
		return err
	}
	o.kubeFlags = kubeFlags(cmd.InheritedFlags())
	var err error
	if o.ssh, err = exec.LookPath(Client); err != nil {
		return fmt.Errorf("%s not found on PATH: install an OpenSSH client", Client)
	}
	if o.self, err = os.Executable(); err != nil {
		return fmt.Errorf("cannot find this program for ssh's ProxyCommand: %w", err)
	}
	if o.client, err = vmclient.New(o.configFlags); err != nil {
		return err
	}
	o.namespace = o.client.Namespace
	return nil
}

// parseArgs reads [USER@]NAME and the command after "--".
func (o *Options) parseArgs(args []string, dash int) error {
	target := args
	if dash >= 0 {
		target, o.Command = args[:dash], args[dash:]
		if len(o.Command) == 0 {
			return errors.New("no command after --")
		}
	}
	switch len(target) {
	case 0:
		return errors.New("a VM is required: [USER@]NAME")
	case 1:
	default:
		return fmt.Errorf("one VM only: %q; a command to run in the guest goes after --", strings.Join(target, " "))
	}
	user, name, ok := strings.Cut(target[0], "@")
	if !ok {
		name, user = user, ""
	}
	switch {
	case ok && user == "":
		return fmt.Errorf("%q: the user before @ is empty", target[0])
	case name == "":
		return fmt.Errorf("%q: the VM name is empty", target[0])
	case user != "" && o.User != "" && user != o.User:
		return fmt.Errorf("%q and -l %s: two users", target[0], o.User)
	}
	o.Name = name
	if user != "" {
		o.User = user
	}
	return nil
}

// Validate checks the port.
func (o *Options) Validate() error {
	if _, err := portforward.ParseGuestPort(o.Port); err != nil {
		return fmt.Errorf("--port %w", err)
	}
	return nil
}

// Run checks that the VM runs, then runs ssh, which ends it.
func (o *Options) Run(ctx context.Context) error {
	// Found before ssh starts: ssh would only say that the connection
	// closed.
	_, _, err := podexec.Running(ctx, o.client, o.Name)
	if err != nil {
		return err
	}
	ssh := exec.CommandContext(ctx, o.ssh, o.sshArgs()...)
	ssh.Stdin, ssh.Stdout, ssh.Stderr = o.stdin, o.Out, o.ErrOut
	// ^C without a terminal reaches ssh too, which ends and tells its
	// exit code; this process waits for it.
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)
	err = ssh.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return &ExitError{Code: exit.ExitCode()}
	}
	return err
}

// sshArgs are ssh's arguments: the ProxyCommand and host key alias, the
// user's options, the destination and the command.
func (o *Options) sshArgs() []string {
	alias := "vm." + o.Name + "." + o.namespace
	args := []string{
		"-o", "ProxyCommand=" + o.proxyCommand(),
		"-o", "HostKeyAlias=" + alias,
	}
	if o.Identity != "" {
		args = append(args, "-i", o.Identity)
	}
	if o.User != "" {
		args = append(args, "-l", o.User)
	}
	for _, opt := range o.SSHOptions {
		args = append(args, "-o", opt)
	}
	// "--" keeps a destination or command starting with "-" from being
	// read as options.
	args = append(args, "--", alias)
	return append(args, o.Command...)
}

// kubeFlags are the kubectl flags set in flags, but the namespace, as
// arguments.
func kubeFlags(flags *pflag.FlagSet) []string {
	var args []string
	// VisitAll: InheritedFlags is a copy that knows nothing of what was set.
	flags.VisitAll(func(f *pflag.Flag) {
		if !f.Changed || f.Name == "namespace" {
			return
		}
		values := []string{f.Value.String()}
		if s, ok := f.Value.(pflag.SliceValue); ok {
			values = s.GetSlice()
		}
		for _, v := range values {
			args = append(args, "--"+f.Name+"="+v)
		}
	})
	return args
}

// proxyCommand is this program's port-forward --stdio for the VM, with
// the kubectl flags given, as a command line for the user's shell (ssh
// runs it with "sh -c") with ssh's % escaped.
func (o *Options) proxyCommand() string {
	words := append([]string{o.self, "port-forward", "--stdio", o.Port, o.Name, "-n", o.namespace}, o.kubeFlags...)
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	return strings.ReplaceAll(strings.Join(words, " "), "%", "%%")
}

// shellQuote quotes s for a POSIX shell unless it is plain.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:@,+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
