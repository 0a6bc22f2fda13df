// Package vmclient finds a VM in a cluster and changes it, in either mode
// (docs/user-guide/vms.md): with the operator, a VM is a VirtualMachine
// and commands patch it; without (GitOps mode), a VM is only the
// StatefulSet and ConfigMap that kubectl vm render made, and commands
// change those, which the next sync from Git undoes. The plugin's cluster commands share it.
package vmclient

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"slices"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vmpod"
)

// FieldManager names the plugin's changes in managed fields.
const FieldManager = "kubectl-vm"

// Mode is how a VM is run.
type Mode string

const (
	// ModeOperator: a VirtualMachine exists; the operator renders it.
	ModeOperator Mode = "operator"
	// ModeGitOps: only rendered objects exist; Git is their source.
	ModeGitOps Mode = "gitops"
)

// GitOpsWarning is printed after a change in GitOps mode.
const GitOpsWarning = "warning: %s/%s has no VirtualMachine (GitOps mode): changed its rendered objects; the next sync from Git undoes this"

// Client reaches the cluster of the kubectl flags.
type Client struct {
	Kube      kubernetes.Interface
	Dynamic   dynamic.Interface
	Metadata  metadata.Interface
	Namespace string
	// Host is the API server's URL, for messages.
	Host string
	// Config is the REST config the clients were made from, for
	// streaming requests (exec, port forward) that typed clients lack.
	Config *rest.Config
}

// New makes a Client from the kubectl flags (-n, --context, --kubeconfig).
func New(flags *genericclioptions.ConfigFlags) (*Client, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-vm/" + version.Get()
	if cfg.QPS == 0 {
		// client-go's default (5 a second, bursts of 10) would hold
		// back list -A's request per namespace.
		cfg.QPS, cfg.Burst = 50, 300
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// The typed clients ask for built-in objects as protobuf, smaller than
	// JSON (10,000 VMs' StatefulSets: 46 MB against 67) and decoded
	// without reflection; VirtualMachines, custom resources, have only
	// JSON.
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{Kube: kube, Dynamic: dyn, Metadata: meta, Namespace: ns, Host: cfg.Host, Config: cfg}, nil
}

// VM is one VM as found in the cluster.
type VM struct {
	Namespace, Name string
	Mode            Mode
	// Object is the VirtualMachine (operator mode), VM its decoding.
	Object *unstructured.Unstructured
	VM     *v1.VirtualMachine
	// StatefulSet runs the VM; nil before the operator rendered it, and
	// in operator mode from List.
	StatefulSet *appsv1.StatefulSet
	// Summary is, from List with Summaries, all it read of a VM in
	// operator mode; Object and VM are nil then.
	Summary *Summary
}

// VMs is the VirtualMachine resource in a namespace.
func (c *Client) VMs(ns string) dynamic.ResourceInterface {
	return c.Dynamic.Resource(v1.GroupVersionResource).Namespace(ns)
}

// Get finds the VM name in the client's namespace.
func (c *Client) Get(ctx context.Context, name string) (*VM, error) {
	vm := &VM{Namespace: c.Namespace, Name: name}
	obj, err := c.VMs(c.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		vm.Mode, vm.Object = ModeOperator, obj
		b, err := obj.MarshalJSON()
		if err != nil {
			return nil, err
		}
		if vm.VM, err = v1.DecodeJSON(b); err != nil {
			return nil, fmt.Errorf("virtualmachine %s/%s: %w", c.Namespace, name, err)
		}
	case apierrors.IsNotFound(err):
		// No such VM, or no CRD at all: look for rendered objects.
		vm.Mode = ModeGitOps
	default:
		return nil, c.Explain(err)
	}
	sts, err := c.Kube.AppsV1().StatefulSets(c.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && sts.Labels[vmpod.LabelName] == vmpod.NameRunner:
		vm.StatefulSet = sts
	case err == nil || apierrors.IsNotFound(err):
		if vm.Mode == ModeGitOps {
			return nil, fmt.Errorf("virtual machine %q not found in namespace %q: no VirtualMachine and no StatefulSet rendered by kubectl vm", name, c.Namespace)
		}
	default:
		return nil, c.Explain(err)
	}
	return vm, nil
}

// Explain turns a request error into one line a person can act on.
func (c *Client) Explain(err error) error {
	var ue *url.Error
	var ne net.Error
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err):
		// The server's message names the user, verb and resource.
		return fmt.Errorf("%w; ask a cluster administrator for that right", err)
	case errors.As(err, &ue) || errors.As(err, &ne):
		return fmt.Errorf("cannot reach the cluster at %s: %w", c.Host, err)
	}
	return err
}

// PatchSpec merge-patches the VirtualMachine's spec.vm (operator mode).
func (c *Client) PatchSpec(ctx context.Context, vm *VM, specVM map[string]any) error {
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"vm": specVM}})
	if err != nil {
		return err
	}
	_, err = c.VMs(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
	return c.Explain(err)
}

// Scale sets the StatefulSet's replicas (GitOps mode).
func (c *Client) Scale(ctx context.Context, vm *VM, replicas int32) error {
	body := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	_, err := c.Kube.AppsV1().StatefulSets(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager}, "scale")
	return c.Explain(err)
}

// UpdateConfig changes the runner config in the VM's ConfigMap (GitOps
// mode) and then annotates the VM's pod (SyncPod), so that the runner sees
// the change within a second and applies it live; warnings go to w. A
// concurrent change makes it fail rather than be overwritten.
func (c *Client) UpdateConfig(ctx context.Context, vm *VM, w io.Writer, change func(*runnerconfig.Config) error) error {
	cm, err := c.Kube.CoreV1().ConfigMaps(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil {
		return c.Explain(err)
	}
	f, err := runnerconfig.Decode([]byte(cm.Data[vmpod.ConfigFile]))
	if err != nil {
		return fmt.Errorf("configmap %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	if err := change(&f.Runner); err != nil {
		return err
	}
	data, err := manifest.Marshal(f)
	if err != nil {
		return err
	}
	// Written without the runner's defaults, checked as the runner will.
	if _, err := runnerconfig.Parse(data); err != nil {
		return fmt.Errorf("configmap %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	cm.Data[vmpod.ConfigFile] = string(data)
	cm, err = c.Kube.CoreV1().ConfigMaps(vm.Namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return c.Explain(err)
	}
	c.SyncPod(ctx, vm, podsync.AnnotationConfigVersion, cm.ResourceVersion, "the change", w)
	return nil
}

// SyncPod sets annotation to resourceVersion on the VM's pod, if it has
// one, right after a write of that version to an object that the pod's
// config volume projects (see pkg/podsync): the kubelet then refreshes the
// volume at once, not at its next periodic sync. A failure, e.g. for want
// of the right to patch pods, is only a warning on w that what changed
// may take a minute to reach the runner.
func (c *Client) SyncPod(ctx context.Context, vm *VM, annotation, resourceVersion, what string, w io.Writer) {
	if _, err := podsync.Nudge(ctx, c.Kube.CoreV1(), vm.Namespace, vm.Name, annotation, resourceVersion, FieldManager); err != nil {
		fmt.Fprintf(w, "warning: %s may take a minute to reach the runner: %v\n", what, c.Explain(err))
	}
}

// Pod returns the VM's pod, nil when there is none.
func (c *Client) Pod(ctx context.Context, vm *VM) (*corev1.Pod, error) {
	pod, err := c.Kube.CoreV1().Pods(vm.Namespace).Get(ctx, render.PodName(vm.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pod, c.Explain(err)
}

// ListOptions select what List returns.
type ListOptions struct {
	// AllNamespaces lists every namespace, not only the client's.
	AllNamespaces bool
	// Objects also keeps each VirtualMachine as unstructured (VM.Object),
	// to print it whole; without, List decodes each VM only once, typed.
	Objects bool
	// Summaries reads the VirtualMachines as their printer columns
	// (VM.Summary) when the CRD and operator provide what a Summary
	// holds, and whole otherwise.
	Summaries bool
}

// List returns the VMs of the client's namespace, or of all namespaces:
// every VirtualMachine, and every StatefulSet rendered by kubectl vm that
// has no VirtualMachine (GitOps mode), sorted by namespace and name. A
// cluster without the CRD has only the latter. Unlike Get, it leaves a
// VM in operator mode without its StatefulSet: what a list shows of it is
// in the VirtualMachine, and 10,000 StatefulSets are 46 MB to read.
func (c *Client) List(ctx context.Context, opts ListOptions) ([]*VM, error) {
	ns := c.Namespace
	if opts.AllNamespaces {
		ns = metav1.NamespaceAll
	}
	sel := metav1.ListOptions{LabelSelector: vmpod.LabelName + "=" + vmpod.NameRunner}
	// Both at once: the API server takes a second or more for each over
	// thousands of VMs. Of the StatefulSets only the names at first: they
	// tell which VMs are in GitOps mode.
	var stss *metav1.PartialObjectMetadataList
	var stsErr error
	listed := make(chan struct{})
	go func() {
		defer close(listed)
		stss, stsErr = c.Metadata.Resource(appsv1.SchemeGroupVersion.WithResource("statefulsets")).Namespace(ns).List(ctx, sel)
	}()
	var vms []*VM
	var summarized bool
	var err error
	if opts.Summaries {
		vms, summarized, err = c.listSummaries(ctx, ns)
	}
	if !summarized && err == nil {
		vms, err = c.listVMs(ctx, ns, opts.Objects)
	}
	<-listed
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, c.Explain(err)
	}
	if stsErr != nil {
		return nil, c.Explain(stsErr)
	}
	byKey := make(map[string]*VM, len(vms))
	for _, vm := range vms {
		byKey[vm.Namespace+"/"+vm.Name] = vm
	}
	gitOps := false
	for _, s := range stss.Items {
		if _, ok := byKey[s.Namespace+"/"+s.Name]; !ok {
			gitOps = true
			break
		}
	}
	if gitOps {
		full, err := c.Kube.AppsV1().StatefulSets(ns).List(ctx, sel)
		if err != nil {
			return nil, c.Explain(err)
		}
		for i := range full.Items {
			s := &full.Items[i]
			key := s.Namespace + "/" + s.Name
			if _, ok := byKey[key]; !ok {
				vm := &VM{Namespace: s.Namespace, Name: s.Name, Mode: ModeGitOps, StatefulSet: s}
				byKey[key] = vm
				vms = append(vms, vm)
			}
		}
	}
	slices.SortFunc(vms, func(a, b *VM) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return vms, nil
}

// listVMs reads the VirtualMachines of ns as the API server sends them and
// decodes each as it arrives, once, on every core: 10,000 VMs are 28 MB
// of JSON (custom resources have no protobuf).
func (c *Client) listVMs(ctx context.Context, ns string, objects bool) ([]*VM, error) {
	body, err := c.Kube.CoreV1().RESTClient().Get().AbsPath(vmsPath(ns)).
		SetHeader("Accept", k8sruntime.ContentTypeJSON).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()

	type item struct {
		vm  *VM
		raw []byte
		err error
	}
	items := make(chan *item, 64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for it := range items {
				it.vm.VM, it.err = decodeVM(it.raw, it.vm)
				if it.err == nil && objects {
					it.vm.Object = &unstructured.Unstructured{}
					it.err = it.vm.Object.UnmarshalJSON(it.raw)
				}
			}
		})
	}
	var all []*item
	err = eachItem(body, func(raw []byte) {
		it := &item{vm: &VM{Mode: ModeOperator}, raw: raw}
		all = append(all, it)
		items <- it
	})
	close(items)
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("list of virtualmachines: %w", err)
	}
	vms := make([]*VM, len(all))
	for i, it := range all {
		if it.err != nil {
			return nil, fmt.Errorf("virtualmachine %s/%s: %w", it.vm.Namespace, it.vm.Name, it.err)
		}
		vms[i] = it.vm
	}
	return vms, nil
}

// listDecoding decodes a listed VM as strictly as v1.DecodeJSON (unknown
// and duplicate fields are errors, names match in case) in about half
// its time (a profile of BenchmarkListAll), and skips the managed fields, which no listing shows: they are
// half of a VM's bytes.
var listDecoding = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	jsonv2.WithUnmarshalers(jsonv2.JoinUnmarshalers(
		jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, _ *[]metav1.ManagedFieldsEntry) error {
			return dec.SkipValue()
		}),
		// As v1.DecodeJSON: a newer vmop may write fields this one does
		// not know.
		jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, st *v1.VirtualMachineStatus) error {
			return jsonv2.UnmarshalDecode(dec, (*lenientStatus)(st), jsonv2.RejectUnknownMembers(false))
		}),
	)),
)

// lenientStatus is a status decoded without listDecoding's function for
// it.
type lenientStatus v1.VirtualMachineStatus

// decodeVM decodes a listed VirtualMachine into vm, whose namespace and
// name it sets also when the VM does not decode, for the error.
func decodeVM(raw []byte, vm *VM) (*v1.VirtualMachine, error) {
	decoded := &v1.VirtualMachine{}
	err := jsonv2.Unmarshal(raw, decoded, listDecoding)
	if err != nil {
		// What the operator says of it, in the same words.
		decoded, err = v1.DecodeJSON(raw)
	}
	if err == nil {
		vm.Namespace, vm.Name = decoded.Namespace, decoded.Name
		return decoded, nil
	}
	var m struct{ Metadata metav1.ObjectMeta }
	_ = json.Unmarshal(raw, &m) // only for the message
	vm.Namespace, vm.Name = m.Metadata.Namespace, m.Metadata.Name
	return nil, err
}

// eachItem calls f with each element of a list's items, read as they
// arrive, each scanned once.
func eachItem(r io.Reader, f func([]byte)) error {
	dec := jsontext.NewDecoder(r)
	if t, err := dec.ReadToken(); err != nil {
		return err
	} else if t.Kind() != '{' {
		return fmt.Errorf("not a list but %v", t.Kind())
	}
	for dec.PeekKind() != '}' {
		key, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if key.String() != "items" || dec.PeekKind() != '[' {
			// Other fields, and "items": null of an empty list.
			if err := dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for dec.PeekKind() != ']' {
			v, err := dec.ReadValue()
			if err != nil {
				return err
			}
			f(bytes.Clone(v))
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken()
	return err
}
