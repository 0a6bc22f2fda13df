// Package configwatch follows a runner's own ConfigMap through the API
// server. The kubelet refreshes a ConfigMap volume about once a minute;
// in GitOps mode nothing asks it to do so sooner (the operator annotates
// the pod), so a live change committed to Git would wait for it. Watched
// through the API, the change reaches the runner within a second. It
// needs get and watch on that one ConfigMap, which kubectl vm render
// grants by name; an account without them keeps the runner on the volume.
package configwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// ErrNotAllowed is returned by Run when the account may not read the
// ConfigMap: the runner then follows the volume alone.
var ErrNotAllowed = errors.New("the runner's account may not get and watch its ConfigMap")

// retry is how long Run waits after a failed read before the next.
const retry = 5 * time.Second

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// Watcher follows one ConfigMap's key.
type Watcher struct {
	cms        dynamic.ResourceInterface
	name, key  string
	log        *slog.Logger
	lastData   string
	haveData   bool
	lastFailed string
	following  bool
}

// Following is logged once the ConfigMap could be read.
const Following = "Following the ConfigMap through the API server"

// New returns a Watcher of key in the ConfigMap namespace/name.
func New(cfg *rest.Config, namespace, name, key string, log *slog.Logger) (*Watcher, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("config watch: %w", err)
	}
	return &Watcher{cms: dc.Resource(configMaps).Namespace(namespace), name: name, key: key,
		log: log.With("configMap", namespace+"/"+name)}, nil
}

// Run calls send with the key's value as it is now and after each change
// until ctx ends, then returns nil. It returns an error wrapping
// ErrNotAllowed at once when the account may not read the ConfigMap. A
// ConfigMap without the key, or one that is gone, sends nothing: the
// volume keeps what it had.
func (w *Watcher) Run(ctx context.Context, send func([]byte)) error {
	for ctx.Err() == nil {
		rv, err := w.get(ctx, send)
		if err == nil {
			err = w.watch(ctx, rv, send)
		}
		switch {
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			return fmt.Errorf("%w: %v", ErrNotAllowed, err)
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			continue // the watch expired: read it again
		}
		if err != nil && ctx.Err() == nil {
			if msg := err.Error(); msg != w.lastFailed {
				w.lastFailed = msg
				w.log.Warn("Cannot watch the ConfigMap; the config volume still brings changes", "err", err, "retry", retry)
			}
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
		}
	}
	return nil
}

// get reads the ConfigMap, sends its value and returns its resourceVersion.
func (w *Watcher) get(ctx context.Context, send func([]byte)) (string, error) {
	cm, err := w.cms.Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if !w.following {
		w.following = true
		w.log.Info(Following)
	}
	w.lastFailed = ""
	w.found(cm, send)
	return cm.GetResourceVersion(), nil
}

// watch follows the ConfigMap from resourceVersion rv until the watch
// cannot resume (it expired: 410), or ctx ends.
func (w *Watcher) watch(ctx context.Context, rv string, send func([]byte)) error {
	byName := fields.OneTermEqualSelector("metadata.name", w.name).String()
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = byName
		return w.cms.Watch(ctx, o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
	if err != nil {
		return err
	}
	defer rw.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-rw.ResultChan():
			if !ok {
				return errors.New("the watch ended")
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if cm, ok := ev.Object.(*unstructured.Unstructured); ok {
					w.found(cm, send)
				}
			case watch.Error:
				return apierrors.FromObject(ev.Object)
			}
		}
	}
}

// found sends the key's value when it changed.
func (w *Watcher) found(cm *unstructured.Unstructured, send func([]byte)) {
	data, ok, _ := unstructured.NestedString(cm.Object, "data", w.key)
	if !ok || w.haveData && data == w.lastData {
		return
	}
	w.lastData, w.haveData = data, true
	send([]byte(data))
}
