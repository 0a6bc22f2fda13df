// Package controller is vm-operator's reconciler: it renders every
// VirtualMachine with pkg/render, applies the objects with server-side
// apply and writes the VM's status from what its StatefulSet and pod show.
//
// It follows kubernetes/sample-controller: informers feed listers and a
// rate-limited workqueue of VM keys; workers reconcile one VM at a time.
// Writes are skipped when the render-hash annotation of an object in the
// cluster matches, so that a resync of an unchanged cluster writes nothing.
// After a write of what a running VM's pod mounts (a live change in its
// ConfigMap), it annotates the pod so that the kubelet passes the change
// on at once (syncPod, pkg/podsync).
package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/vmpod"
)

// FieldManager owns what the operator applies, status included.
const FieldManager = "vm-operator"

// EventController is the reportingController of the operator's events.
const EventController = v1.Group + "/vm-operator"

// retryMax bounds the backoff of a failing VM: nothing tells the operator
// that what refused a write (an admission policy, a quota) has gone, so it
// must look again soon; client-go's default waits up to 16 minutes.
const retryMax = 30 * time.Second

// Config is what New needs besides the clients.
type Config struct {
	// Namespaces to watch; empty means all.
	Namespaces []string
	// Resync makes the informers deliver every object again this often, so
	// that a missed event is repaired. Zero means 10 minutes.
	Resync time.Duration
	// RunnerAccess returns the service account of runner pods in a
	// namespace and its role binding, which the operator creates in each
	// VM namespace. Nil leaves runner pods with the default account.
	RunnerAccess func(namespace string) (*corev1.ServiceAccount, *rbacv1.RoleBinding)
	// Metrics receives counts; nil means a private registry.
	Metrics *Metrics
	// ImageRegistry is where VMs without spec.image find the runner
	// image; empty means vmop's own (render.Options.ImageRegistry).
	ImageRegistry string
}

// Controller reconciles VirtualMachines. Create it with New, start it
// with Run.
type Controller struct {
	kube    kubernetes.Interface
	vms     dynamic.NamespaceableResourceInterface
	cfg     Config
	metrics *Metrics

	scopes    map[string]*scope // by namespace; "" when watching all
	synced    []cache.InformerSynced
	factories []interface{ Start(<-chan struct{}) }

	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]

	// written remembers what this process wrote until the informers show
	// it, so that a reconcile right after a write does not repeat it.
	written *writeCache
	// reported remembers statuses written but not yet cached.
	reported *reportedStatuses
	// renders remembers what each VM rendered to.
	renders *renderCache
	// access remembers the namespaces whose runner account is in place.
	access sync.Map

	// events records events about VMs (events.k8s.io), sent by
	// broadcaster while Run runs.
	broadcaster events.EventBroadcaster
	events      events.EventRecorder
}

// scope holds the listers of one watched namespace (or of all).
type scope struct {
	vms          cache.GenericLister
	statefulSets appslisters.StatefulSetLister
	configMaps   corelisters.ConfigMapLister
	secrets      corelisters.SecretLister
	services     corelisters.ServiceLister
	budgets      policylisters.PodDisruptionBudgetLister
	pods         corelisters.PodLister
}

// New sets up the informers and handlers; nothing runs until Run.
func New(kube kubernetes.Interface, dyn dynamic.Interface, cfg Config) *Controller {
	if cfg.Resync == 0 {
		cfg.Resync = 10 * time.Minute
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	c := &Controller{
		kube:    kube,
		vms:     dyn.Resource(v1.GroupVersionResource),
		cfg:     cfg,
		metrics: cfg.Metrics,
		scopes:  map[string]*scope{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, retryMax),
				&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "virtualmachines"},
		),
		written:  newWriteCache(),
		reported: newReportedStatuses(),
		renders:  newRenderCache(),
		// Aggregated and rate-limited: a problem repeated for a VM
		// becomes one event series, not a write per reconcile.
		broadcaster: events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()}),
	}
	c.events = c.broadcaster.NewRecorder(scheme.Scheme, EventController)
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		c.scopes[ns] = c.watch(kube, dyn, ns)
	}
	return c
}

// watch makes the informers of one namespace. Only objects labelled as a
// VM runner's are cached: the operator never needs the others, and a
// cluster has many.
func (c *Controller) watch(kube kubernetes.Interface, dyn dynamic.Interface, ns string) *scope {
	selector := labels.Set{vmpod.LabelName: vmpod.NameRunner}.String()
	// Only the VMs resync: a VM's reconcile reads its objects from the
	// caches, so their resyncs would only queue it two or three times more.
	kf := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }),
		informers.WithTransform(trim))
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, c.cfg.Resync, ns, nil)
	vmInformer := df.ForResource(v1.GroupVersionResource)
	utilruntime.Must(vmInformer.Informer().SetTransform(cacheVM))

	s := &scope{
		// Not the dynamic lister, which holds unstructured objects only.
		vms:          cache.NewGenericLister(vmInformer.Informer().GetIndexer(), v1.GroupVersionResource.GroupResource()),
		statefulSets: kf.Apps().V1().StatefulSets().Lister(),
		configMaps:   kf.Core().V1().ConfigMaps().Lister(),
		secrets:      kf.Core().V1().Secrets().Lister(),
		services:     kf.Core().V1().Services().Lister(),
		budgets:      kf.Policy().V1().PodDisruptionBudgets().Lister(),
		pods:         kf.Core().V1().Pods().Lister(),
	}
	vmHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueVM,
		UpdateFunc: func(old, obj any) {
			if sameVersion(old, obj) {
				// A resync, not a change: spread over half the period,
				// behind the VMs that changed, not all at once (10,000
				// VMs take the operator 10 s or more).
				c.enqueueVMAfter(obj, rand.N(c.cfg.Resync/2))
				return
			}
			c.enqueueVM(obj)
		},
		DeleteFunc: c.enqueueVM,
	}
	owned := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueOwner,
		UpdateFunc: func(_, obj any) { c.enqueueOwner(obj) },
		DeleteFunc: c.deletedOwned,
	}
	informersToSync := []cache.SharedIndexInformer{
		vmInformer.Informer(),
		kf.Apps().V1().StatefulSets().Informer(),
		kf.Core().V1().ConfigMaps().Informer(),
		kf.Core().V1().Secrets().Informer(),
		kf.Core().V1().Services().Informer(),
		kf.Policy().V1().PodDisruptionBudgets().Informer(),
		kf.Core().V1().Pods().Informer(),
	}
	for i, inf := range informersToSync {
		h := cache.ResourceEventHandler(owned)
		if i == 0 {
			h = vmHandler
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			utilruntime.HandleError(err)
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	c.factories = append(c.factories, kf, df)
	return s
}

// trim drops what the operator never reads before an object enters a
// cache: managed fields everywhere, the last-applied annotation (a copy of
// the object), and of the objects it renders all but their metadata, since
// it compares their render hashes, not their contents. With a thousand
// VMs this is most of the operator's memory.
func trim(obj any) (any, error) {
	m, err := meta(obj)
	if err != nil {
		return obj, nil //nolint:nilerr // not an object with metadata: kept whole
	}
	m.SetManagedFields(nil)
	if a := m.GetAnnotations(); a[corev1.LastAppliedConfigAnnotation] != "" {
		delete(a, corev1.LastAppliedConfigAnnotation)
		m.SetAnnotations(a)
	}
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		o.Spec, o.Status = appsv1.StatefulSetSpec{}, appsv1.StatefulSetStatus{}
	case *corev1.ConfigMap:
		o.Data, o.BinaryData = nil, nil
	case *corev1.Secret:
		o.Data, o.StringData = nil, nil
	case *corev1.Service:
		o.Spec, o.Status = corev1.ServiceSpec{}, corev1.ServiceStatus{}
	case *policyv1.PodDisruptionBudget:
		o.Spec, o.Status = policyv1.PodDisruptionBudgetSpec{}, policyv1.PodDisruptionBudgetStatus{}
	case *corev1.Pod:
		// The status and the node tell how the VM runs; the claims, what
		// an unscheduled pod waits for (vmstatus.WaitingClaims).
		spec := corev1.PodSpec{NodeName: o.Spec.NodeName}
		for _, v := range o.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				spec.Volumes = append(spec.Volumes, v)
			}
		}
		o.Spec = spec
	}
	return obj, nil
}

// cacheVM trims a VirtualMachine and decodes it, once per change rather
// than at each reconcile (with 10,000 VMs the operator's resync spent a
// fifth of its CPU decoding): the cache holds a *v1.VirtualMachine, or the
// unstructured object if it does not decode, for reconcile to report.
func cacheVM(obj any) (any, error) {
	obj, err := trim(obj)
	if err != nil {
		return nil, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	if vm, err := decodeVM(u); err == nil {
		return vm, nil
	}
	return u, nil
}

func meta(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	return m, nil
}

func (c *Controller) enqueueVM(obj any) { c.enqueueVMAfter(obj, 0) }

func (c *Controller) enqueueVMAfter(obj any, d time.Duration) {
	m, err := meta(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.AddAfter(cache.ObjectName{Namespace: m.GetNamespace(), Name: m.GetName()}, d)
}

// sameVersion tells an informer's resync, which delivers an object
// again, from a change.
func sameVersion(old, obj any) bool {
	o, err1 := meta(old)
	n, err2 := meta(obj)
	return err1 == nil && err2 == nil && o.GetResourceVersion() == n.GetResourceVersion()
}

// enqueueOwner queues the VM an object belongs to, by its instance label:
// objects rendered without an operator (GitOps mode) have no owner
// reference, and a VM created later adopts them.
func (c *Controller) enqueueOwner(obj any) {
	m, err := meta(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	if vm := m.GetLabels()[vmpod.LabelInstance]; vm != "" {
		c.queue.Add(cache.ObjectName{Namespace: m.GetNamespace(), Name: vm})
	}
}

func (c *Controller) deletedOwned(obj any) {
	m, err := meta(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.written.forgetObject(m.GetUID())
	c.enqueueOwner(obj)
}

// Run starts the informers, waits for their caches and runs workers
// until ctx ends; it returns when the workers have finished.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	log := klog.FromContext(ctx)

	for _, f := range c.factories {
		f.Start(ctx.Done())
	}
	if err := c.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return err
	}
	defer c.broadcaster.Shutdown()
	log.Info("Waiting for informer caches to sync")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		// Only ctx's end stops the wait: a SIGTERM while starting is a
		// clean stop, not a failure.
		log.Info("Stopped before the informer caches synced")
		return nil
	}
	c.metrics.synced.Set(1)
	log.Info("Starting workers", "count", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	<-ctx.Done()
	log.Info("Shutting down workers")
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// VMListers are the VirtualMachine caches, one per watched namespace (or
// one of all), for metrics computed at scrape time (pkg/vm-operator/vmmetrics). They
// are empty until Run starts the informers, i.e. on a standby replica.
func (c *Controller) VMListers() []cache.GenericLister {
	ls := make([]cache.GenericLister, 0, len(c.scopes))
	for _, s := range c.scopes {
		ls = append(ls, s.vms)
	}
	return ls
}

// HasSynced tells whether the caches are filled (readiness).
func (c *Controller) HasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextItem(ctx) {
	}
}

func (c *Controller) processNextItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	log := klog.LoggerWithValues(klog.FromContext(ctx), "vm", key.String())
	ctx = klog.NewContext(ctx, log)

	start := time.Now()
	requeue, err := c.reconcile(ctx, key)
	c.metrics.observeReconcile(time.Since(start), err)
	switch {
	case err != nil:
		// Conflicts and other failed writes are retried with backoff.
		log.Error(err, "Reconcile failed; retrying", "attempt", c.queue.NumRequeues(key)+1)
		c.queue.AddRateLimited(key)
	case requeue > 0:
		c.queue.Forget(key)
		c.queue.AddAfter(key, requeue)
	default:
		c.queue.Forget(key)
	}
	return true
}

// scopeOf returns the listers that cover namespace ns.
func (c *Controller) scopeOf(ns string) *scope {
	if s, ok := c.scopes[ns]; ok {
		return s
	}
	return c.scopes[metav1.NamespaceAll]
}
