package vmclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// Summary is a VM in operator mode as the CRD's printer columns show it:
// all that kubectl vm list's table needs. The API server prints the
// columns of 10,000 VMs for a fifth of the CPU it takes to send them
// whole.
type Summary struct {
	// State is spec.vm.state, "" when unset.
	State string
	// Status is the printable status vm-operator writes.
	Status string
	// CPUs and RAM are what the runner reports in use, "" when nothing.
	CPUs, RAM string
	// TargetCPUs and TargetRAM are what the spec asks for, with defaults.
	TargetCPUs, TargetRAM string
	Node, Console         string
	// Age is how old the VM is, by the API server's clock.
	Age string
}

// summaryColumns are the printer columns a Summary is read from, by name.
var summaryColumns = []string{"Name", "State", "Status", "CPUs", "RAM", "Target CPUs", "Target RAM", "Node", "Console", "Age"}

// tableAccept asks the API server for the printer columns (a
// meta.k8s.io/v1 Table).
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// maxSummaryNamespaces bounds the requests for the summaries of all
// namespaces. A Table row has no namespace without the VM's metadata,
// which, with its managed fields, costs the API server more than the
// columns; so the summaries of all namespaces take one request per
// namespace, each about 3.5 ms of the API server's CPU. Beyond this
// many namespaces, whole VMs in one request cost less.
const maxSummaryNamespaces = 200

// errWholeVMs tells listSummaries' requests apart that found a namespace
// whose VMs only whole VMs describe.
var errWholeVMs = errors.New("whole VMs needed")

// listSummaries reads the VMs of ns, or of every namespace, as their
// printer columns. It returns false, and no VMs, when only whole VMs tell
// what list shows: the CRD lacks a column of summaryColumns (an older
// vmop), a VM has no printable status yet (no vm-operator that writes it
// has reported on it), or for all namespaces the user may not list them
// or there are more than maxSummaryNamespaces.
func (c *Client) listSummaries(ctx context.Context, ns string) ([]*VM, bool, error) {
	if ns != metav1.NamespaceAll {
		return c.summariesIn(ctx, ns)
	}
	nss, err := c.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) || (err == nil && len(nss.Items) > maxSummaryNamespaces) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	// The first namespace that needs whole VMs, or fails, cancels the
	// requests for the others: its answer is the list's.
	results := make([][]*VM, len(nss.Items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, n := range nss.Items {
		g.Go(func() error {
			vms, ok, err := c.summariesIn(gctx, n.Name)
			if err == nil && !ok {
				err = errWholeVMs
			}
			results[i] = vms
			return err
		})
	}
	if err := g.Wait(); err != nil {
		if errors.Is(err, errWholeVMs) {
			return nil, false, nil
		}
		return nil, false, err
	}
	var vms []*VM
	for _, r := range results {
		vms = append(vms, r...)
	}
	return vms, true, nil
}

// summariesIn reads the VMs of namespace ns as their printer columns,
// without their metadata; see listSummaries.
func (c *Client) summariesIn(ctx context.Context, ns string) ([]*VM, bool, error) {
	// Stream, unlike DoRaw, decodes the API server's errors.
	body, err := c.Kube.CoreV1().RESTClient().Get().AbsPath(vmsPath(ns)).
		Param("includeObject", string(metav1.IncludeNone)).SetHeader("Accept", tableAccept).Stream(ctx)
	if err != nil {
		return nil, false, err
	}
	defer body.Close()
	return decodeSummaries(body, ns)
}

// table is the part of a meta.k8s.io/v1 Table that summaries read.
type table struct {
	Kind              string `json:"kind"`
	ColumnDefinitions []struct {
		Name string `json:"name"`
	} `json:"columnDefinitions"`
	Rows []struct {
		Cells []any `json:"cells"`
	} `json:"rows"`
}

// decodeSummaries reads a Table of the VMs of namespace ns: see
// listSummaries.
func decodeSummaries(r io.Reader, ns string) ([]*VM, bool, error) {
	var t table
	if err := jsonv2.UnmarshalRead(r, &t); err != nil {
		return nil, false, fmt.Errorf("table of virtualmachines in %s: %w", ns, err)
	}
	if t.Kind != "Table" {
		// A server that cannot print tables sends the list instead.
		return nil, false, nil
	}
	col := map[string]int{}
	for i, d := range t.ColumnDefinitions {
		col[d.Name] = i
	}
	for _, name := range summaryColumns {
		if _, ok := col[name]; !ok {
			return nil, false, nil
		}
	}
	vms := make([]*VM, len(t.Rows))
	for i, r := range t.Rows {
		cell := func(name string) string {
			j := col[name]
			if j >= len(r.Cells) {
				return ""
			}
			switch v := r.Cells[j].(type) {
			case string:
				return v
			case float64:
				return strconv.FormatFloat(v, 'f', -1, 64)
			}
			return ""
		}
		s := &Summary{
			State: cell("State"), Status: cell("Status"), CPUs: cell("CPUs"), RAM: cell("RAM"),
			TargetCPUs: cell("Target CPUs"), TargetRAM: cell("Target RAM"),
			Node: cell("Node"), Console: cell("Console"), Age: cell("Age"),
		}
		if s.Status == "" {
			return nil, false, nil
		}
		vms[i] = &VM{Namespace: ns, Name: cell("Name"), Mode: ModeOperator, Summary: s}
	}
	return vms, true, nil
}

// vmsPath is the URL path of the VirtualMachines of ns.
func vmsPath(ns string) string {
	path := "/apis/" + v1.APIVersion
	if ns != metav1.NamespaceAll {
		path += "/namespaces/" + ns
	}
	return path + "/" + v1.Resource
}
