// Package status is "kubectl vm status NAME": a VM's spec next to what the
// cluster reports about it, in either mode, for a person to read. Its View
// is also what "kubectl vm list" shows.
package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmpod"
)

const example = `  # What a VM is asked to do and what it does
  %[1]s status test-vm

  # A VM of another namespace
  %[1]s status -n lab desktop`

// Options are the options of the status command.
type Options struct {
	Name string

	cmdName     string // "kubectl vm", for hints
	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	// now is the clock of ages; tests fix it.
	now func() time.Time
	genericiooptions.IOStreams
}

// NewCmd makes the status command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmd(name, configFlags, streams, time.Now)
}

func newCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, now func() time.Time) *cobra.Command {
	o := &Options{cmdName: name, configFlags: configFlags, IOStreams: streams, now: now}
	return &cobra.Command{
		Use:   "status NAME",
		Short: "Show a VM's spec and what it does",
		Long: `Show a virtual machine's spec next to what the cluster reports: desired
and actual state, CPUs and RAM (asked for, and in use as the runner reports
them), CD drives, display, pending restart, pod, disks and the conditions
that vm-operator and the runner write. While the VM waits for vmop's node
agent, a "Node agent" line says what the agent's pod on the VM's node (or
on any node, before the VM's pod has one) is stuck on, for whoever may read
its namespace.

Without a VirtualMachine (GitOps mode) the spec is the VM's ConfigMap and
StatefulSet, and only the pod (and the claims it waits for) tells what the
VM does, with the reasons vm-operator would give (e.g. ImageRepositoryMissing,
NoDefaultStorageClass, NodeAgentMissing): there are no conditions, and CPUs
and RAM in use are not reported.`,
		Example:           fmt.Sprintf(example, name),
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
}

// Complete takes the VM's name and makes the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate checks the arguments.
func (o *Options) Validate() error {
	if o.Name == "" {
		return errors.New("NAME must not be empty")
	}
	return nil
}

// Run prints the report.
func (o *Options) Run(ctx context.Context) error {
	c := o.client
	vm, err := c.Get(ctx, o.Name)
	if err != nil {
		return err
	}
	v, err := Load(ctx, c, vm)
	if err != nil {
		return err
	}
	// The claims of the StatefulSet's templates carry the VM's labels.
	sel := labels.SelectorFromSet(render.SelectorLabels(vm.Name)).String()
	pvcs, err := c.Kube.CoreV1().PersistentVolumeClaims(vm.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return c.Explain(err)
	}
	return o.print(v, pvcs.Items)
}

// print writes the report as kubectl describe does: "Label:  value"
// fields aligned across the report, and tables aligned on their own.
func (o *Options) print(v *View, pvcs []corev1.PersistentVolumeClaim) error {
	w := printers.GetNewTabWriter(o.Out)
	field := func(label, value string) { fmt.Fprintf(w, "%s:\t%s\n", label, value) }
	table := func(label string, header []string, rows [][]string) error {
		if err := w.Flush(); err != nil {
			return err
		}
		return writeTable(o.Out, label, header, rows)
	}

	field("Name", v.Name)
	field("Namespace", v.Namespace)
	if v.Mode == vmclient.ModeGitOps {
		field("Mode", string(v.Mode)+" (no VirtualMachine: the next sync from Git undoes changes made with kubectl vm)")
	} else {
		field("Mode", string(v.Mode))
	}
	field("State", string(v.State()))
	field("Status", withMessage(v.Phase()))
	switch {
	case v.NodeAgentErr != nil:
		field("Node agent", "cannot be read: "+oneLine(v.NodeAgentErr.Error()))
	case v.NodeAgent != nil:
		field("Node agent", strings.Join(v.NodeAgent, "; "))
	}
	if v.ConfigErr != nil {
		field("Spec", "cannot be read: "+oneLine(v.ConfigErr.Error()))
	}
	var spec runnerconfig.VM
	if v.Config != nil {
		spec = v.Config.VM
	}
	field("CPUs", sizes(v.Config != nil, fmt.Sprint(spec.CurrentCPUs), fmt.Sprint(spec.MaximumCPUs), v.CPUs()))
	field("RAM", sizes(v.Config != nil, v1.FormatBytes(spec.CurrentRAM.Bytes), v1.FormatBytes(spec.MaximumRAM.Bytes), v.RAM()))
	if a := v.Accelerator(); a != "" {
		field("Accelerator", a)
	}
	drive := 0
	for _, d := range spec.Drives {
		if d.Type == runnerconfig.DriveCDROM {
			// As the spec names it: relative to the image repository.
			field(fmt.Sprintf("CD drive %d", drive), cmp.Or(strings.TrimPrefix(d.File, vmpod.ImageRepositoryDir+"/"), "<empty>"))
			drive++
		}
	}
	if v.Config != nil {
		if drive == 0 {
			field("CD drives", "<none>")
		}
		field("Display", o.display(v))
		field("Networks", networks(v))
	}
	if restart, why := v.RestartPending(); restart {
		field("Restart pending", withMessage("yes", why))
	} else {
		field("Restart pending", "no")
	}
	field("Pod", podSummary(v.Pod))
	field("Guest", v.Guest())
	if ifaces := v.Interfaces(); len(ifaces) > 0 {
		rows := make([][]string, len(ifaces))
		for i, n := range ifaces {
			rows[i] = []string{n.Name, cmp.Or(n.MAC, "<none>"), cmp.Or(strings.Join(n.IPAddresses, " "), "<none>")}
		}
		if err := table("Guest interfaces", []string{"Name", "MAC", "Addresses"}, rows); err != nil {
			return err
		}
	}

	if len(pvcs) == 0 {
		field("Disks (PVCs)", "<none>")
	} else {
		rows := make([][]string, len(pvcs))
		for i, p := range pvcs {
			capacity := ""
			if q, ok := p.Status.Capacity[corev1.ResourceStorage]; ok {
				capacity = q.String()
			}
			rows[i] = []string{p.Name, string(p.Status.Phase), cmp.Or(capacity, "<none>"), cmp.Or(ptr.Deref(p.Spec.StorageClassName, ""), "<none>")}
		}
		if err := table("Disks (PVCs)", []string{"Name", "Phase", "Capacity", "Storage Class"}, rows); err != nil {
			return err
		}
	}

	var conds []metav1.Condition
	if v.VM.VM != nil {
		conds = v.VM.VM.Status.Conditions
	}
	switch {
	case v.Mode == vmclient.ModeGitOps:
		field("Conditions", "<none> (only vm-operator and the runner of a VirtualMachine report them)")
	case len(conds) == 0:
		field("Conditions", "<none>")
	default:
		rows := make([][]string, len(conds))
		for i, c := range conds {
			rows[i] = []string{c.Type, string(c.Status), c.Reason, Age(o.now(), c.LastTransitionTime), oneLine(c.Message)}
		}
		if err := table("Conditions", []string{"Type", "Status", "Reason", "Age", "Message"}, rows); err != nil {
			return err
		}
	}
	if len(v.Events) == 0 {
		field("Events", "<none>")
		return w.Flush()
	}
	rows, left := eventRows(o.now(), v.Events)
	label := "Events"
	if left > 0 {
		label = fmt.Sprintf("Events (the latest %d; kubectl events --for %s shows all)", len(rows), v.eventsFor())
	}
	if err := table(label, []string{"Type", "Reason", "Age", "From", "Message"}, rows); err != nil {
		return err
	}
	return w.Flush()
}

// writeTable writes rows under a label, indented and with a header as
// kubectl describe's tables; empty last cells leave no trailing blanks.
func writeTable(out io.Writer, label string, header []string, rows [][]string) error {
	fmt.Fprintf(out, "%s:\n", label)
	w := printers.GetNewTabWriter(out)
	underline := make([]string, len(header))
	for i, h := range header {
		underline[i] = strings.Repeat("-", len(h))
	}
	for _, row := range append([][]string{header, underline}, rows...) {
		fmt.Fprintf(w, "  %s\n", strings.TrimRight(strings.Join(row, "\t"), "\t"))
	}
	return w.Flush()
}

// display describes the SPICE server and who uses it.
func (o *Options) display(v *View) string {
	d := v.Config.VM.Display
	if d == nil || d.Spice == nil {
		return "no SPICE server"
	}
	if d.Spice.WithoutPassword {
		return fmt.Sprintf("SPICE on port %d WITHOUT A PASSWORD: %s", d.Spice.Port, render.DisplayWithoutPasswordWarning)
	}
	s := fmt.Sprintf("SPICE on port %d, locked but for one-time passwords (%s console %s) and Secret %s", d.Spice.Port, o.cmdName, v.Name, v.DisplaySecret())
	if v.Mode == vmclient.ModeOperator {
		s += ", console client: " + cmp.Or(v.ConsoleClient(), "none")
	}
	return s
}

// networks says how each NIC reaches the world, and how the guest is
// reached.
func networks(v *View) string {
	var nics []string
	for _, n := range v.Config.VM.Network {
		switch n.Type {
		case runnerconfig.NetworkPod:
			ports := "all ports"
			if len(n.Ports) > 0 {
				ports = "ports " + runnerconfig.JoinPorts(n.Ports)
			} else if own := v.Config.VM.OwnPorts(); len(own) > 0 {
				ports += " but " + runnerconfig.JoinPorts(own) + " (SPICE)"
			}
			at := cmp.Or(v.podIP(), "the pod's IP")
			nics = append(nics, fmt.Sprintf("pod (%s of %s reach the guest)", ports, at))
		case runnerconfig.NetworkTap:
			nics = append(nics, "tap on the node's bridge "+n.Bridge)
		default:
			nics = append(nics, n.Type)
		}
	}
	if len(nics) == 0 {
		return "<none>"
	}
	return strings.Join(nics, "; ")
}

// sizes puts what the spec asks for next to what is in use.
func sizes(specKnown bool, current, maximum, inUse string) string {
	s := "<unknown>"
	if specKnown {
		s = "current " + current + ", maximum " + maximum
	}
	if inUse != "" {
		s += ", in use " + inUse
	}
	return s
}

// podSummary is the pod's name, state (as kubectl get pods tells it, in
// short) and node.
func podSummary(pod *corev1.Pod) string {
	if pod == nil {
		return "<none>"
	}
	state := string(pod.Status.Phase)
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == render.ContainerRunner && cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			state = cs.State.Waiting.Reason
		}
	}
	if pod.DeletionTimestamp != nil {
		state = "Terminating"
	}
	s := pod.Name + ", " + state
	if pod.Spec.NodeName != "" {
		s += ", on node " + pod.Spec.NodeName
	}
	// A runner that died and was restarted in the same pod (its guest
	// rebooted) shows nowhere else once it runs again.
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != render.ContainerRunner || cs.RestartCount == 0 {
			continue
		}
		times := "times"
		if cs.RestartCount == 1 {
			times = "time"
		}
		s += fmt.Sprintf(", runner restarted %d %s", cs.RestartCount, times)
		if t := cs.LastTerminationState.Terminated; t != nil {
			s += fmt.Sprintf(" (last exit code %d, %s, at %s)", t.ExitCode, t.Reason, t.FinishedAt.UTC().Format(time.RFC3339))
		}
	}
	return s
}

func withMessage(s, msg string) string {
	if msg == "" {
		return s
	}
	return s + ": " + oneLine(msg)
}

// oneLine keeps a message (e.g. a runner's last log lines) in its row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
