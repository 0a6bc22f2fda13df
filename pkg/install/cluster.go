package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/vmstatus"
)

// FieldManager owns the fields that install applies.
const FieldManager = "kubectl-vm"

// pollInterval is how often waits look again.
const pollInterval = 250 * time.Millisecond

var (
	crdGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	deploymentGVR = appsv1.SchemeGroupVersion.WithResource("deployments")
	daemonSetGVR  = appsv1.SchemeGroupVersion.WithResource("daemonsets")
	pvcGVR        = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	namespaceGVR  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// Cluster applies and deletes installed objects, writing one line per
// object as kubectl does.
type Cluster struct {
	client dynamic.Interface
	kube   kubernetes.Interface
	mapper meta.RESTMapper
	out    io.Writer
}

// Connect makes a Cluster and checks that the API server answers, so that
// an unreachable cluster gives one clear error instead of one per object.
func Connect(config *rest.Config, mapper meta.RESTMapper, out io.Writer) (*Cluster, error) {
	if config.QPS == 0 && config.RateLimiter == nil {
		// client-go's default of 5 requests a second would spend most of a
		// short --timeout on applying the objects.
		config = rest.CopyConfig(config)
		config.QPS, config.Burst = 50, 100
	}
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, err
	}
	if _, err := dc.ServerVersion(); err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			return nil, fmt.Errorf("the Kubernetes API server at %s: %w", config.Host, err)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said already
		}
		return nil, fmt.Errorf("cannot reach the Kubernetes API server at %s: %w", config.Host, err)
	}
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &Cluster{client: client, kube: kube, mapper: mapper, out: out}, nil
}

// Apply applies objs in order, server-side and taking over fields that
// others own: the installation is the source of truth for these objects.
// The server rejects unknown fields, so a typo in a manifest fails loudly.
// After a CRD it waits until the CRD is established, so that what follows
// may use it.
func (c *Cluster) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	keep := map[*unstructured.Unstructured]bool{}
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			continue
		}
		ns, err := c.client.Resource(namespaceGVR).Get(ctx, o.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && IsOwn(ns):
		case err != nil:
			return objectError("get", "namespace/"+o.GetName(), err)
		case ns.GetLabels()[psaapi.EnforceLevelLabel] == string(psaapi.LevelPrivileged):
			keep[o] = true
		default:
			// Its label would let anyone who may create pods there run
			// them privileged.
			return fmt.Errorf("namespace %[1]s exists and is not vmop's: kubectl vm install does not label it %[2]s=%[3]s, "+
				"which the node agent needs; label it so yourself (kubectl label namespace %[1]s %[2]s=%[3]s --overwrite) "+
				"if it may hold privileged pods, or install into a namespace of vmop's own",
				o.GetName(), psaapi.EnforceLevelLabel, psaapi.LevelPrivileged)
		}
	}
	for _, o := range objs {
		ref, ri, err := c.resource(o)
		if err != nil {
			return err
		}
		if keep[o] {
			fmt.Fprintf(c.out, "%s kept: it is not vmop's, and admits privileged pods already\n", ref)
			continue
		}
		data, err := json.Marshal(o.Object)
		if err != nil {
			return err
		}
		_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
			FieldManager:    FieldManager,
			Force:           ptr.To(true),
			FieldValidation: metav1.FieldValidationStrict,
		})
		if err != nil {
			return objectError("apply", ref, err)
		}
		fmt.Fprintf(c.out, "%s serverside-applied\n", ref)
		if o.GetKind() == "CustomResourceDefinition" {
			if err := c.waitEstablished(ctx, ref, o.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitEstablished waits until the API server serves the CRD's resource.
func (c *Cluster) waitEstablished(ctx context.Context, ref, name string) error {
	return c.poll(ctx, ref, always("established yet"), nil, func(ctx context.Context) (bool, error) {
		crd, err := c.client.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		return slices.ContainsFunc(conds, func(c any) bool {
			m, _ := c.(map[string]any)
			return m["type"] == "Established" && m["status"] == "True"
		}), nil
	})
}

// WaitAvailable waits until the operator's Deployment in namespace has
// rolled out: every replica updated and available, as kubectl rollout
// status sees it.
func (c *Cluster) WaitAvailable(ctx context.Context, namespace string) error {
	ref := "deployment.apps/" + OperatorName
	var selector *metav1.LabelSelector
	stuck := func(ctx context.Context) ([]string, error) {
		return vmstatus.WorkloadStuck(ctx, c.kube, namespace, "Deployment", OperatorName, selector)
	}
	err := c.poll(ctx, ref, always("available yet"), stuck, func(ctx context.Context) (bool, error) {
		u, err := c.client.Resource(deploymentGVR).Namespace(namespace).Get(ctx, OperatorName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
			return false, err
		}
		selector = d.Spec.Selector
		want := ptr.Deref(d.Spec.Replicas, 1)
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want &&
			s.Replicas == want && s.AvailableReplicas == want, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s available\n", ref)
	return nil
}

// WaitNodeAgent waits until the node agent's DaemonSet in namespace runs
// on every node it is scheduled to: an updated pod available on each, as
// kubectl rollout status sees it.
func (c *Cluster) WaitNodeAgent(ctx context.Context, namespace string) error {
	ref := "daemonset.apps/" + NodeAgentName
	var last *appsv1.DaemonSet
	what := func() string {
		if last == nil || last.Status.ObservedGeneration < last.Generation {
			return "ready yet (the DaemonSet controller has not counted its nodes)"
		}
		return fmt.Sprintf("ready on every node yet (%d of %d nodes not ready)", notReady(last), last.Status.DesiredNumberScheduled)
	}
	stuck := func(ctx context.Context) ([]string, error) {
		if last == nil {
			return nil, nil
		}
		return vmstatus.WorkloadStuck(ctx, c.kube, namespace, "DaemonSet", NodeAgentName, last.Spec.Selector)
	}
	err := c.poll(ctx, ref, what, stuck, func(ctx context.Context) (bool, error) {
		u, err := c.client.Resource(daemonSetGVR).Namespace(namespace).Get(ctx, NodeAgentName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var d appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
			return false, err
		}
		last = &d
		return d.Status.ObservedGeneration >= d.Generation && notReady(&d) == 0, nil
	})
	if err != nil {
		return err
	}
	nodes := "nodes"
	if last.Status.DesiredNumberScheduled == 1 {
		nodes = "node"
	}
	fmt.Fprintf(c.out, "%s ready on %d %s\n", ref, last.Status.DesiredNumberScheduled, nodes)
	return nil
}

// notReady counts the nodes of d that lack an available pod of its
// current template.
func notReady(d *appsv1.DaemonSet) int32 {
	s := d.Status
	return max(s.DesiredNumberScheduled-s.NumberAvailable, s.DesiredNumberScheduled-s.UpdatedNumberScheduled, 0)
}

// always is the what of a poll that says the same whatever it saw.
func always(what string) func() string { return func() string { return what } }

// poll calls done until it says yes, fails, or ctx ends; an error of the
// API server ends the wait only when it will not go away by waiting. what
// says what ref is not when the wait gives up ("available yet"); while it
// waits, each new line of stuck (what ref's pods are stuck on) is written
// at once, and the last ones end the error.
func (c *Cluster) poll(ctx context.Context, ref string, what func() string, stuck func(context.Context) ([]string, error), done func(context.Context) (bool, error)) error {
	var last error
	var said, stuckOn []string
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		ok, err := done(ctx)
		if err != nil && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) {
			return false, err
		}
		if ctx.Err() == nil { // not the wait's own end
			last = err
			if !ok && stuck != nil {
				// What cannot be read now, or a moment with no reason known
				// (a crash-looping container between its restarts), leaves
				// what was said before.
				if lines, serr := stuck(ctx); serr == nil && len(lines) > 0 {
					stuckOn = lines
				}
				for _, line := range stuckOn {
					if !slices.Contains(said, line) {
						said = append(said, line)
						fmt.Fprintf(c.out, "%s waits: %s\n", ref, line)
					}
				}
			}
		}
		return ok, nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		msg := fmt.Sprintf("%s is not %s, giving up (see --timeout)", ref, what())
		if len(stuckOn) > 0 {
			msg += ": " + strings.Join(stuckOn, "; ")
		}
		if last != nil {
			msg += ": last error: " + last.Error()
		}
		return errors.New(msg)
	default:
		return objectError("get", ref, err)
	}
}

// Delete deletes objs in reverse order, so that the operator stops before
// what it needs goes. Objects that are not there are fine. A namespace
// that install did not create (not labelled as vmop's) is kept, and so
// is one that holds PersistentVolumeClaims: deleting it would delete
// them, and they hold VM disks. So is one that holds the operator's
// Deployment when objs do not (the node agent's alone are deleted).
func (c *Cluster) Delete(ctx context.Context, objs []*unstructured.Unstructured) error {
	withOperator := slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "Deployment" && o.GetName() == OperatorName
	})
	for _, o := range slices.Backward(objs) {
		ref, ri, err := c.resource(o)
		if meta.IsNoMatchError(err) {
			// The cluster does not know the kind, so there is no such object.
			fmt.Fprintf(c.out, "%s not found\n", ref)
			continue
		}
		if err != nil {
			return err
		}
		if o.GetKind() == "Namespace" {
			ns, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				fmt.Fprintf(c.out, "%s not found\n", ref)
				continue
			case err != nil:
				return objectError("get", ref, err)
			case !IsOwn(ns):
				fmt.Fprintf(c.out, "%s kept: it is not vmop's\n", ref)
				continue
			}
			pvcs, err := c.client.Resource(pvcGVR).Namespace(o.GetName()).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return objectError("list PersistentVolumeClaims in", ref, err)
			}
			if len(pvcs.Items) > 0 {
				fmt.Fprintf(c.out, "%s kept: it holds PersistentVolumeClaims\n", ref)
				continue
			}
			if !withOperator {
				_, err := c.client.Resource(deploymentGVR).Namespace(o.GetName()).Get(ctx, OperatorName, metav1.GetOptions{})
				switch {
				case err == nil:
					fmt.Fprintf(c.out, "%s kept: it holds deployment.apps/%s\n", ref, OperatorName)
					continue
				case !apierrors.IsNotFound(err):
					return objectError("get deployment.apps/"+OperatorName+" in", ref, err)
				}
			}
		}
		err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		switch {
		case apierrors.IsNotFound(err):
			fmt.Fprintf(c.out, "%s not found\n", ref)
		case err != nil:
			return objectError("delete", ref, err)
		default:
			fmt.Fprintf(c.out, "%s deleted\n", ref)
		}
	}
	return nil
}

// resource returns how kubectl names o (kind.group/name) and the client of
// its resource.
func (c *Cluster) resource(o *unstructured.Unstructured) (string, dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	ref := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		ref += "." + gvk.Group
	}
	ref += "/" + o.GetName()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return ref, nil, fmt.Errorf("%s: %w", ref, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return ref, c.client.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return ref, c.client.Resource(m.Resource), nil
}

// objectError says what failed on which object, and when it was refused
// for want of rights, what it takes. (A namespace that is being deleted
// refuses new objects as forbidden too; rights would not help there.)
func objectError(verb, ref string, err error) error {
	if apierrors.IsForbidden(err) && !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return fmt.Errorf("%s %s: %w: this needs cluster-admin-like rights (vmop installs a CRD, cluster-wide RBAC and an admission policy)", verb, ref, err)
	}
	return fmt.Errorf("%s %s: %w", verb, ref, err)
}
