package controller

import (
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// writeKey names something the operator writes: an object of a kind, or
// "status" of a VM.
type writeKey struct {
	kind, namespace, name string
}

type writeEntry struct {
	hash string
	rv   uint64
	uid  types.UID
}

// writeCache remembers the hash and resourceVersion of each write until
// the informer has caught up. Without it, a reconcile that runs between a
// write and its watch event would see the old object and write again.
type writeCache struct {
	mu sync.Mutex
	m  map[writeKey]writeEntry
}

func newWriteCache() *writeCache { return &writeCache{m: map[writeKey]writeEntry{}} }

// remember records a write whose result is obj.
func (w *writeCache) remember(k writeKey, hash string, obj metav1.Object) {
	rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	w.mu.Lock()
	w.m[k] = writeEntry{hash: hash, rv: rv, uid: obj.GetUID()}
	w.mu.Unlock()
}

// covers tells whether a write of hash is already done although the
// cached object (nil when the cache has none) does not show it yet, i.e.
// the cache is older than the write. Resource versions are etcd revisions
// here; one that does not parse makes the cache count as current.
func (w *writeCache) covers(k writeKey, hash string, cached metav1.Object) bool {
	w.mu.Lock()
	e, ok := w.m[k]
	w.mu.Unlock()
	if !ok || e.hash != hash {
		return false
	}
	if cached == nil {
		return true
	}
	rv, err := strconv.ParseUint(cached.GetResourceVersion(), 10, 64)
	if err != nil || rv >= e.rv {
		// The cache has caught up; from now on it alone decides.
		w.forget(k)
		return false
	}
	return true
}

func (w *writeCache) forget(k writeKey) {
	w.mu.Lock()
	delete(w.m, k)
	w.mu.Unlock()
}

// forgetObject drops the entry of a deleted object, so that the object is
// written again instead of being believed in place.
func (w *writeCache) forgetObject(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, e := range w.m {
		if e.uid == uid {
			delete(w.m, k)
		}
	}
}

// forgetVM drops all entries of a VM's namespace and name (the VM is gone).
func (w *writeCache) forgetVM(namespace string, names ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.m {
		if k.namespace != namespace {
			continue
		}
		for _, n := range names {
			if k.name == n {
				delete(w.m, k)
			}
		}
	}
}

// reportedStatuses keeps the status the operator last wrote to a VM until
// the cache shows it, so that the events of a status change are told
// against what the VM really had, not a stale copy (and not twice).
type reportedStatuses struct {
	mu sync.Mutex
	m  map[writeKey]reported
}

type reported struct {
	rv uint64
	st opStatus
}

func newReportedStatuses() *reportedStatuses {
	return &reportedStatuses{m: map[writeKey]reported{}}
}

func (r *reportedStatuses) remember(k writeKey, obj metav1.Object, st opStatus) {
	rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	r.mu.Lock()
	r.m[k] = reported{rv: rv, st: st}
	r.mu.Unlock()
}

// since returns the status the VM had before the next write: cached,
// unless the operator wrote one the cache does not show yet.
func (r *reportedStatuses) since(k writeKey, cached metav1.Object, current opStatus) opStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[k]
	if !ok {
		return current
	}
	if rv, err := strconv.ParseUint(cached.GetResourceVersion(), 10, 64); err != nil || rv >= e.rv {
		delete(r.m, k)
		return current
	}
	return e.st
}

// forget drops what is kept of a deleted VM.
func (r *reportedStatuses) forget(k writeKey) {
	r.mu.Lock()
	delete(r.m, k)
	r.mu.Unlock()
}
