package controller

import (
	"maps"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
)

// rendered is what a reconcile needs of a VM's render besides writing
// it: each object's kind, name and hash, what the status reads, and which
// of the optional objects the VM has.
type rendered struct {
	objects                 []renderedObject
	restartHash             string
	warnings                []string
	secret, service, budget bool
}

type renderedObject struct{ kind, name, hash string }

func summarize(objs *render.Objects) *rendered {
	r := &rendered{
		restartHash: objs.StatefulSet.Spec.Template.Annotations[render.AnnotationRestartHash],
		warnings:    objs.Warnings,
		secret:      objs.Secret != nil,
		service:     objs.Service != nil,
		budget:      objs.DisruptionBudget != nil,
	}
	for _, obj := range objs.List() {
		_, o := describe(obj)
		r.objects = append(r.objects, o)
	}
	return r
}

// describe returns a rendered object's metadata, and its kind, name and
// hash.
func describe(obj runtime.Object) (metav1.Object, renderedObject) {
	m := obj.(metav1.Object) // render's objects all are
	return m, renderedObject{
		kind: obj.GetObjectKind().GroupVersionKind().Kind,
		name: m.GetName(),
		hash: m.GetAnnotations()[render.AnnotationHash],
	}
}

// renderCache remembers each VM's last render that was written in full,
// with what it was rendered from, so that a reconcile of a VM whose
// inputs are the same (a resync, or the events of the operator's own
// writes) need not render it again while the cluster has its objects as
// rendered: rendering was the largest part of such a reconcile's CPU.
// Render reads of a VM its name, namespace, spec (whose every change
// metadata.generation counts) and annotations, and the options.
type renderCache struct {
	mu sync.Mutex
	m  map[cache.ObjectName]renderEntry
}

type renderEntry struct {
	uid         types.UID
	generation  int64
	annotations map[string]string
	opts        render.Options
	out         *rendered
}

func newRenderCache() *renderCache { return &renderCache{m: map[cache.ObjectName]renderEntry{}} }

// get returns what vm rendered to with opts, nil if not known.
func (r *renderCache) get(vm *v1.VirtualMachine, opts render.Options) *rendered {
	r.mu.Lock()
	e, ok := r.m[cache.ObjectName{Namespace: vm.Namespace, Name: vm.Name}]
	r.mu.Unlock()
	if !ok || e.uid != vm.UID || e.generation != vm.Generation || e.opts != opts || !maps.Equal(e.annotations, vm.Annotations) {
		return nil
	}
	return e.out
}

// put remembers what vm rendered to with opts. The cached VM is never
// changed in place (the informer replaces it), so its annotations are
// kept, not copied.
func (r *renderCache) put(vm *v1.VirtualMachine, opts render.Options, out *rendered) {
	r.mu.Lock()
	r.m[cache.ObjectName{Namespace: vm.Namespace, Name: vm.Name}] = renderEntry{
		uid: vm.UID, generation: vm.Generation, annotations: vm.Annotations, opts: opts, out: out,
	}
	r.mu.Unlock()
}

// forget drops what is kept of a deleted VM.
func (r *renderCache) forget(key cache.ObjectName) {
	r.mu.Lock()
	delete(r.m, key)
	r.mu.Unlock()
}
