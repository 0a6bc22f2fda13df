// Package list is "kubectl vm list": the VMs of a namespace, or of all, in
// either mode, as a table like kubectl get's or as a YAML or JSON List.
package list

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/status"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/vmpod"
)

// outputWide adds columns to the table.
const outputWide = "wide"

// outputs are the values of -o besides the default table.
var outputs = []string{outputWide, manifest.FormatYAML, manifest.FormatJSON}

const example = `  # The VMs of the current namespace
  %[1]s list

  # The VMs of all namespaces, with their mode and readiness
  %[1]s ls -A -o wide

  # The VirtualMachines (and StatefulSets of VMs in GitOps mode) as JSON
  %[1]s list -n lab -o json

  # Before draining node-1: its VMs and what the drain does to each
  %[1]s list -A --node node-1`

// Options are the options of the list command.
type Options struct {
	AllNamespaces bool
	Output        string
	// Node keeps only the VMs whose pod runs there.
	Node string

	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	// now is the clock of the AGE column; tests fix it.
	now func() time.Time
	genericiooptions.IOStreams
}

// NewCmd makes the list command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmd(name, configFlags, streams, time.Now)
}

func newCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, now func() time.Time) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams, now: now}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List virtual machines",
		Long: `List the virtual machines of the namespace, or of all namespaces with -A:
every VirtualMachine (operator mode) and every StatefulSet rendered by
kubectl vm that has no VirtualMachine (GitOps mode).

STATE is the desired state; STATUS is what the VM does: the reason of
vm-operator's Running condition (Running, Starting, Stopping, Stopped), or
of its Failed condition, or Paused while a disk's error holds the guest;
in GitOps mode derived from the pod. CPUS and RAM are what the runner reports
in use, or in parentheses the spec's current values when nothing is
reported (a stopped VM, or GitOps mode, where the runner has no
VirtualMachine to report to). CONSOLE is the address of the connected
SPICE client. -o wide adds MODE (operator or gitops), READY (the Ready condition: qemu
runs the VM, or it is stopped as its spec says) and IP (the guest's first
address, from its agent).

--node NODE lists only the VMs whose pod runs on NODE, with DRAIN: what
kubectl drain NODE does to each. "shuts down, back after uncordon": a disk
lives on the node (a local or hostPath volume, or one whose node affinity
names the host), so the VM starts again once the node is uncordoned;
"shuts down, starts on another node": its disks are network storage;
"waits for you (drain: wait)": the VM's annotation
vmoperator.jdrupes.org/drain: wait keeps the drain from evicting its pod
until you stop the VM (kubectl vm stop). --node reads the claims' volumes,
which takes the right to get persistentvolumes.

-o yaml and -o json print a v1 List of the VirtualMachines and, for VMs in
GitOps mode, their StatefulSets.`,
		Example:           fmt.Sprintf(example, name),
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "list the VMs of all namespaces")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "output format: "+strings.Join(outputs, ", ")+" (default: a table)")
	cmd.Flags().StringVar(&o.Node, "node", "", "only the VMs whose pod runs on this node, with what a drain of it does to each")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputs, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// Complete makes the client.
func (o *Options) Complete() error {
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.Output != "" && !slices.Contains(outputs, o.Output) {
		return fmt.Errorf("--output %q is not supported: use one of %s", o.Output, strings.Join(outputs, ", "))
	}
	return nil
}

// Run lists the VMs.
func (o *Options) Run(ctx context.Context) error {
	vms, err := o.client.List(ctx, vmclient.ListOptions{
		AllNamespaces: o.AllNamespaces,
		Objects:       o.Output == manifest.FormatYAML || o.Output == manifest.FormatJSON,
		// The printer columns have all the plain table needs.
		Summaries: o.Output == "" && o.Node == "",
	})
	if err != nil {
		return err
	}
	return o.show(ctx, vms)
}

// show prints vms, as Run found them.
func (o *Options) show(ctx context.Context, vms []*vmclient.VM) error {
	var drains map[string]string
	var err error
	if o.Node != "" {
		if vms, drains, err = o.onNode(ctx, vms); err != nil {
			return err
		}
	}
	if o.Output == manifest.FormatYAML || o.Output == manifest.FormatJSON {
		return o.printList(vms)
	}
	if len(vms) == 0 {
		// As kubectl get says it, on stderr so that scripts see no rows.
		where := ""
		if o.Node != "" {
			where = " on node " + o.Node
		}
		if o.AllNamespaces {
			fmt.Fprintf(o.ErrOut, "No VMs found%s.\n", where)
		} else {
			fmt.Fprintf(o.ErrOut, "No VMs found%s in %s namespace.\n", where, o.client.Namespace)
		}
		return nil
	}
	rows, err := o.rows(ctx, vms)
	if err != nil {
		return err
	}
	return o.printTable(rows, drains)
}

// row is a VM's line in the table.
type row struct {
	namespace, name, state, status, cpus, ram, node, console, age string
	// mode, ready and ip are for -o wide, which reads whole VMs.
	mode, ready, ip string
}

// rows makes the table's lines, from the VMs' summaries or views, in the
// order of vms.
func (o *Options) rows(ctx context.Context, vms []*vmclient.VM) ([]row, error) {
	var whole []*vmclient.VM
	for _, vm := range vms {
		if vm.Summary == nil {
			whole = append(whole, vm)
		}
	}
	views, err := o.views(ctx, whole)
	if err != nil {
		return nil, err
	}
	rows := make([]row, len(vms))
	for i, vm := range vms {
		if s := vm.Summary; s != nil {
			rows[i] = row{namespace: vm.Namespace, name: vm.Name, state: cmp.Or(s.State, string(v1.StateStopped)),
				status: s.Status, cpus: cmp.Or(s.CPUs, parenthesized(s.TargetCPUs)), ram: cmp.Or(s.RAM, parenthesized(s.TargetRAM)),
				node: s.Node, console: s.Console, age: s.Age}
			continue
		}
		v := views[0]
		views = views[1:]
		phase, _ := v.Phase()
		cpus, ram := v.CPUs(), v.RAM()
		if v.Config != nil {
			cpus = cmp.Or(cpus, parenthesized(strconv.Itoa(int(v.Config.VM.CurrentCPUs))))
			ram = cmp.Or(ram, parenthesized(v1.FormatBytes(v.Config.VM.CurrentRAM.Bytes)))
		}
		rows[i] = row{namespace: v.Namespace, name: v.Name, state: string(v.State()), status: phase, cpus: cpus, ram: ram,
			node: v.Node(), console: v.ConsoleClient(), age: status.Age(o.now(), v.Created()),
			mode: string(v.Mode), ready: v.Ready(), ip: v.IP()}
	}
	return rows, nil
}

// parenthesized marks a size the spec asks for, not one in use; "" stays.
func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

// views finds the pods and ConfigMaps of the VMs in GitOps mode, with one
// request each for all of them, since only those tell what such a VM
// does and asks for.
func (o *Options) views(ctx context.Context, vms []*vmclient.VM) ([]*status.View, error) {
	c := o.client
	pods := map[string]*corev1.Pod{}
	cms := map[string]*corev1.ConfigMap{}
	if slices.ContainsFunc(vms, func(vm *vmclient.VM) bool { return vm.Mode == vmclient.ModeGitOps }) {
		ns := c.Namespace
		if o.AllNamespaces {
			ns = metav1.NamespaceAll
		}
		sel := metav1.ListOptions{LabelSelector: vmpod.LabelName + "=" + vmpod.NameRunner}
		podList, err := c.Kube.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			return nil, c.Explain(err)
		}
		for i := range podList.Items {
			p := &podList.Items[i]
			pods[p.Namespace+"/"+p.Name] = p
		}
		cmList, err := c.Kube.CoreV1().ConfigMaps(ns).List(ctx, sel)
		if err != nil {
			return nil, c.Explain(err)
		}
		for i := range cmList.Items {
			cm := &cmList.Items[i]
			cms[cm.Namespace+"/"+cm.Name] = cm
		}
	}
	views := make([]*status.View, len(vms))
	for i, vm := range vms {
		key := vm.Namespace + "/" + vm.Name
		views[i] = status.NewView(vm, pods[key+"-0"], cms[key])
		if err := views[i].ExplainClaims(ctx, c); err != nil {
			return nil, err
		}
	}
	return views, nil
}

// printTable writes the rows; drains, by VM key, adds the DRAIN column.
func (o *Options) printTable(rows []row, drains map[string]string) error {
	w := printers.GetNewTabWriter(o.Out)
	header := []string{"NAME", "STATE", "STATUS", "CPUS", "RAM", "NODE", "CONSOLE", "AGE"}
	if o.AllNamespaces {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if drains != nil {
		header = append(header, "DRAIN")
	}
	if o.Output == outputWide {
		header = append(header, "MODE", "READY", "IP")
	}
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		line := []string{r.name, r.state, r.status, cmp.Or(r.cpus, "<none>"), cmp.Or(r.ram, "<none>"),
			cmp.Or(r.node, "<none>"), cmp.Or(r.console, "<none>"), r.age}
		if o.AllNamespaces {
			line = append([]string{r.namespace}, line...)
		}
		if drains != nil {
			line = append(line, drains[r.namespace+"/"+r.name])
		}
		if o.Output == outputWide {
			line = append(line, r.mode, r.ready, cmp.Or(r.ip, "<none>"))
		}
		fmt.Fprintln(w, strings.Join(line, "\t"))
	}
	return w.Flush()
}

// printList writes the VMs' objects as kubectl get -o yaml|json does: a
// v1 List whose items keep their status but not their managed fields.
// (manifest.Writer writes manifests, without status, so it does not fit.)
func (o *Options) printList(vms []*vmclient.VM) error {
	items := make([]any, len(vms))
	for i, vm := range vms {
		if vm.Object != nil {
			unstructured.RemoveNestedField(vm.Object.Object, "metadata", "managedFields")
			items[i] = vm.Object.Object
			continue
		}
		sts := vm.StatefulSet.DeepCopy()
		sts.APIVersion, sts.Kind = "apps/v1", "StatefulSet"
		sts.ManagedFields = nil
		items[i] = sts
	}
	list := map[string]any{
		"apiVersion": "v1",
		"kind":       "List",
		"metadata":   map[string]any{"resourceVersion": ""},
		"items":      items,
	}
	var b []byte
	var err error
	if o.Output == manifest.FormatYAML {
		b, err = manifest.Marshal(list)
	} else {
		b, err = json.MarshalIndent(list, "", "    ")
		b = append(b, '\n')
	}
	if err != nil {
		return err
	}
	_, err = o.Out.Write(b)
	return err
}
