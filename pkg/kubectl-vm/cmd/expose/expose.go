// Package expose is "kubectl vm expose": a Service that reaches ports of a
// VM's guest, as "virtctl expose" makes one for a KubeVirt VM. The Service
// selects the VM's runner pod by the labels that pkg/render gives it, so
// it reaches the guest where the guest is on its pod's network; the
// command warns of ports that reach nothing of the guest (no pod network,
// or a port that the pod network does not pass).
package expose

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/create"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/portforward"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/status"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// Types and Protocols are the values of --type and --protocol.
var (
	Types     = []string{string(corev1.ServiceTypeClusterIP), string(corev1.ServiceTypeNodePort), string(corev1.ServiceTypeLoadBalancer)}
	Protocols = []string{string(corev1.ProtocolTCP), string(corev1.ProtocolUDP)}
)

const example = `  # The guest's SSH server in the cluster, at web-22.<namespace>.svc port 22
  %[1]s expose web --port 22

  # Its web server on ports 80 and 443 of a load balancer, as Service web-http
  %[1]s expose web --port 80 --port 443 --type LoadBalancer --name web-http

  # A NodePort for the guest's port 2222, as Service port 22
  %[1]s expose web --port 22:2222 --type NodePort

  # Print the Service to commit it to Git next to the VM; nothing is sent
  %[1]s expose web --port 22 -o yaml`

// Port is a port of the Service and the guest's port it reaches.
type Port struct {
	Port, Target int32
}

// ParsePort reads a --port value: PORT[:TARGET], TARGET defaulting to
// PORT.
func ParsePort(s string) (Port, error) {
	port, target, pair := strings.Cut(s, ":")
	if !pair {
		target = port
	}
	p, err := portforward.ParseGuestPort(port)
	if err != nil {
		return Port{}, fmt.Errorf("--port %q: port %w", s, err)
	}
	t, err := portforward.ParseGuestPort(target)
	if err != nil {
		return Port{}, fmt.Errorf("--port %q: guest port %w", s, err)
	}
	return Port{Port: int32(p), Target: int32(t)}, nil
}

// portName names the Service port port, so that a Service of several
// ports is valid (each must have a name) and its names say which is
// which; ports are unique, and so are their names.
func portName(port int32) string { return "p" + strconv.Itoa(int(port)) }

// defaultName is the Service's name without --name: the VM's name and the
// first port, e.g. web-22. The VM's name alone is taken: it is the name of
// the Service that render makes of spec.loadBalancerService (and that the
// operator deletes, when the VM owns it and no longer renders it), and the
// StatefulSet's serviceName. With the port in the name, one VM's ports can
// be exposed in separate Services (web-22 for SSH inside the cluster,
// web-443 on a load balancer) without --name.
func defaultName(vm string, first Port) string {
	return vm + "-" + strconv.Itoa(int(first.Port))
}

// Options are the options of the expose command.
type Options struct {
	// Name is the VM's; ServiceName the Service's (--name).
	Name, ServiceName string
	Ports             []Port
	Type, Protocol    string
	Output, DryRun    string

	portArgs    []string // --port as given
	namespace   string   // -n as given, for a printed Service
	service     *corev1.Service
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

// NewCmd makes the expose command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "expose NAME --port PORT[:TARGET]... [--type ClusterIP|NodePort|LoadBalancer] [--name SVC] [--protocol TCP|UDP] [-o yaml|json] [--dry-run[=server]]",
		Short: "Make a Service that reaches ports of a VM's guest",
		Long: `Make a Service that reaches ports of a VM's guest, as virtctl expose does
for KubeVirt. The Service selects the VM's runner pod by the labels the
VM's StatefulSet gives it; each --port PORT[:TARGET] is a Service port
PORT (named pPORT, e.g. p22) that goes to the guest's port TARGET
(default PORT). --protocol applies to every port.

The Service reaches the guest on its pod network (spec.vm.networks[].pod),
at the ports that network passes: those of its ports list, or all but the
pod's own SPICE port. A VM with only user or tap networks is not reached
at all (kubectl vm port-forward and ssh reach such a guest through its
runner). The Service is made all the same, with a warning for each port
that reaches nothing of the guest.

The Service is named NAME-PORT after the first port (e.g. web-22), or
--name; never NAME, the name of the Service the VM renders itself
(spec.loadBalancerService). If a Service of the name exists, that is an
error and the Service stays as it is.

With the operator (a VirtualMachine), the VirtualMachine owns the
Service: it is deleted with the VM. In GitOps mode (no VirtualMachine)
nothing owns it: delete it yourself, or print it with -o yaml and keep
it in Git next to the VM's rendered objects.

With -o the Service is printed and nothing is sent to the cluster (it
names a namespace only when -n is given), unless --dry-run=server asks
the API server to check it and prints what it would store. Otherwise the
VM must exist in the cluster.

Needs the rights to get virtualmachines and statefulsets (to find the
VM) and to create services in the VM's namespace; in GitOps mode the
network warning reads the VM's ConfigMap (get configmaps).`,
		Example:           fmt.Sprintf(example, name),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.VMName(configFlags),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Complete(args)
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.portArgs, "port", nil, "a Service port and the guest's port it reaches, PORT[:TARGET] (TARGET defaults to PORT); may repeat")
	f.StringVar(&o.Type, "type", string(corev1.ServiceTypeClusterIP), "the Service's type: "+strings.Join(Types, ", "))
	f.StringVar(&o.ServiceName, "name", "", "the Service's name (default NAME-PORT, after the first --port)")
	f.StringVar(&o.Protocol, "protocol", string(corev1.ProtocolTCP), "the protocol of every port: "+strings.Join(Protocols, " or "))
	f.StringVarP(&o.Output, "output", "o", "", "print the Service in this format ("+strings.Join(manifest.Formats, " or ")+") instead of creating it")
	f.StringVar(&o.DryRun, "dry-run", create.DryRunNone, "client: only check the flags; server: let the API server check the Service too; nothing is created")
	f.Lookup("dry-run").NoOptDefVal = create.DryRunClient
	_ = cmd.RegisterFlagCompletionFunc("port", cobra.NoFileCompletions)
	_ = cmd.RegisterFlagCompletionFunc("name", cobra.NoFileCompletions)
	_ = cmd.RegisterFlagCompletionFunc("type", cobra.FixedCompletions(Types, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("protocol", cobra.FixedCompletions(Protocols, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(manifest.Formats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("dry-run", cobra.FixedCompletions(create.DryRuns, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// Complete takes the VM's name and the namespace given with -n: like
// kubectl create, a printed Service names a namespace only when one was
// given.
func (o *Options) Complete(args []string) {
	o.Name = args[0]
	if o.configFlags != nil && o.configFlags.Namespace != nil {
		o.namespace = *o.configFlags.Namespace
	}
}

// Validate reads the ports, checks the flags and builds the Service; every
// problem names its flag, all of them at once.
func (o *Options) Validate() error {
	var errs []error
	// The VM's name is a label value of the Service and its selector.
	if msgs := validation.IsDNS1123Label(o.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("name %q: not a VM name: %s", o.Name, strings.Join(msgs, "; ")))
	}
	o.Ports = nil
	for _, a := range o.portArgs {
		p, err := ParsePort(a)
		errs = append(errs, err)
		o.Ports = append(o.Ports, p)
	}
	if o.Output != "" && !slices.Contains(manifest.Formats, o.Output) {
		errs = append(errs, fmt.Errorf("--output %q is not supported: use one of %s", o.Output, strings.Join(manifest.Formats, ", ")))
	}
	if !slices.Contains(create.DryRuns, o.DryRun) {
		errs = append(errs, fmt.Errorf("--dry-run %q is not supported: use one of %s", o.DryRun, strings.Join(create.DryRuns, ", ")))
	}
	if !slices.Contains(Types, o.Type) {
		errs = append(errs, fmt.Errorf("--type %q is not supported: use one of %s", o.Type, strings.Join(Types, ", ")))
	}
	if !slices.Contains(Protocols, o.Protocol) {
		errs = append(errs, fmt.Errorf("--protocol %q is not supported: use one of %s", o.Protocol, strings.Join(Protocols, ", ")))
	}
	if len(o.Ports) == 0 {
		errs = append(errs, errors.New("--port: at least one port is required: PORT[:TARGET]"))
	}
	for i, p := range o.Ports {
		if j := slices.IndexFunc(o.Ports[:i], func(q Port) bool { return q.Port == p.Port }); j >= 0 && p.Port != 0 {
			errs = append(errs, fmt.Errorf("--port %q: port %d is given twice (also --port %q)", o.portArgs[i], p.Port, o.portArgs[j]))
		}
	}
	if err := o.validateName(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	o.service = o.newService()
	return nil
}

// validateName checks the Service's name, given or the default, and
// settles it.
func (o *Options) validateName() error {
	flag := fmt.Sprintf("--name %q", o.ServiceName)
	hint := ""
	if o.ServiceName == "" {
		if len(o.Ports) == 0 || o.Ports[0].Port == 0 || len(validation.IsDNS1123Label(o.Name)) > 0 {
			return nil // no default; --port or the VM's name says why
		}
		o.ServiceName = defaultName(o.Name, o.Ports[0])
		flag, hint = fmt.Sprintf("--name (default %q)", o.ServiceName), "; give one with --name"
	}
	if o.ServiceName == o.Name {
		return fmt.Errorf("%s: the VM's own Service has that name (spec.loadBalancerService, the StatefulSet's serviceName): choose another", flag)
	}
	if msgs := validation.IsDNS1035Label(o.ServiceName); len(msgs) > 0 {
		return fmt.Errorf("%s: not a Service name: %s%s", flag, strings.Join(msgs, "; "), hint)
	}
	return nil
}

// newService is the Service of the options: the VM's labels, as render puts
// them on every object of the VM, and the selector of its StatefulSet.
func (o *Options) newService() *corev1.Service {
	ports := make([]corev1.ServicePort, len(o.Ports))
	for i, p := range o.Ports {
		ports[i] = corev1.ServicePort{
			Name:       portName(p.Port),
			Port:       p.Port,
			TargetPort: intstr.FromInt32(p.Target),
			Protocol:   corev1.Protocol(o.Protocol),
		}
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: o.ServiceName, Namespace: o.namespace, Labels: render.Labels(o.Name)},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceType(o.Type),
			Selector: render.SelectorLabels(o.Name),
			Ports:    ports,
		},
	}
}

// Run prints the Service or creates it.
func (o *Options) Run(ctx context.Context) error {
	svc := o.service
	if o.DryRun != create.DryRunServer && (o.Output != "" || o.DryRun == create.DryRunClient) {
		if o.Output == "" {
			fmt.Fprintf(o.Out, "service/%s created (dry run)\n", svc.Name)
			return nil
		}
		return manifest.WriteObjects(o.Out, o.Output, svc)
	}
	c, err := vmclient.New(o.configFlags)
	if err != nil {
		return err
	}
	vm, err := c.Get(ctx, o.Name)
	if err != nil {
		return err
	}
	svc.Namespace = vm.Namespace
	if vm.Mode == vmclient.ModeOperator {
		// Not a controller reference: the operator does not manage the
		// Service; the garbage collector deletes it with the VM. Nor
		// blockOwnerDeletion, which would need the right to update the
		// VM's finalizers.
		svc.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1.APIVersion, Kind: v1.Kind, Name: vm.Name, UID: vm.Object.GetUID()}}
	}
	opts := metav1.CreateOptions{FieldManager: vmclient.FieldManager}
	suffix := ""
	if o.DryRun == create.DryRunServer {
		opts.DryRun = []string{metav1.DryRunAll}
		suffix = " (server dry run)"
	}
	created, err := c.Kube.CoreV1().Services(vm.Namespace).Create(ctx, svc, opts)
	switch {
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("service %q already exists in namespace %q: nothing changed (choose another name with --name)", svc.Name, vm.Namespace)
	case err != nil:
		return c.Explain(err)
	}
	for _, w := range o.unreached(ctx, c, vm) {
		fmt.Fprintf(o.ErrOut, "warning: %s/%s: %s\n", vm.Namespace, vm.Name, w)
	}
	if o.Output != "" {
		created.ManagedFields = nil
		created.TypeMeta = svc.TypeMeta
		return manifest.WriteObjects(o.Out, o.Output, created)
	}
	fmt.Fprintf(o.Out, "service/%s created%s\n", created.Name, suffix)
	return nil
}

// unreached warns of the Service's ports that reach nothing of the guest,
// by the runner config that the VM's spec makes (as status shows it:
// rendered from the VirtualMachine, or in GitOps mode the ConfigMap's). A
// guest on no pod network is reached at no port of its pod's IP; a pod
// network with ports passes only those, one without passes all but the
// pod's own (SPICE). Without the config, or the right to read its
// ConfigMap, nothing is said.
func (o *Options) unreached(ctx context.Context, c *vmclient.Client, vm *vmclient.VM) []string {
	var cm *corev1.ConfigMap
	if vm.Mode == vmclient.ModeGitOps {
		var err error
		if cm, err = c.Kube.CoreV1().ConfigMaps(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{}); err != nil {
			return nil
		}
	}
	v := status.NewView(vm, nil, cm)
	if v.ConfigErr != nil {
		return nil
	}
	nets := v.Config.VM.Network
	i := slices.IndexFunc(nets, func(n runnerconfig.Network) bool { return n.Type == runnerconfig.NetworkPod })
	if i < 0 {
		kinds := make([]string, len(nets))
		for j, n := range nets {
			kinds[j] = n.Type
		}
		return []string{fmt.Sprintf("the guest is not on the pod network (its networks: %s): the Service reaches nothing of the guest", cmp.Or(strings.Join(kinds, ", "), "none"))}
	}
	var warnings []string
	pod := nets[i]
	for _, p := range o.Ports {
		guest := runnerconfig.Port{Port: int(p.Target), Protocol: o.Protocol}
		switch {
		case len(pod.Ports) > 0 && !slices.Contains(pod.Ports, guest):
			warnings = append(warnings, fmt.Sprintf("guest port %s is not one its pod network passes (spec.vm.networks[%d].pod.ports: %s): Service port %d reaches nothing of the guest",
				guest, i, runnerconfig.JoinPorts(pod.Ports), p.Port))
		case len(pod.Ports) == 0 && slices.Contains(v.Config.VM.OwnPorts(), guest):
			warnings = append(warnings, fmt.Sprintf("port %d/TCP of the pod is its own SPICE server's: Service port %d reaches the VM's display, not the guest", guest.Port, p.Port))
		}
	}
	return warnings
}
