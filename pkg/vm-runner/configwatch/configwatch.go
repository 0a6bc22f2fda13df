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
	"net/http"
	"net/url"
	"time"

	"github.com/vmop/vmop/pkg/kubeapi"
)

// ErrNotAllowed is returned by Run when the account may not read the
// ConfigMap: the runner then follows the volume alone.
var ErrNotAllowed = errors.New("the runner's account may not get and watch its ConfigMap")

// retry is how long Run waits after a failed read before the next.
const retry = 5 * time.Second

// Watcher follows one ConfigMap's key.
type Watcher struct {
	c          *kubeapi.Client
	collection string // the namespace's configmaps
	name, key  string
	log        *slog.Logger
	lastData   string
	haveData   bool
	lastFailed string
	following  bool
}

// configMap is what the watcher reads of a ConfigMap.
type configMap struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

// Following is logged once the ConfigMap could be read.
const Following = "Following the ConfigMap through the API server"

// New returns a Watcher of key in the ConfigMap namespace/name.
func New(cfg *kubeapi.Config, namespace, name, key string, log *slog.Logger) (*Watcher, error) {
	c, err := kubeapi.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("config watch: %w", err)
	}
	return &Watcher{c: c, collection: "/api/v1/namespaces/" + namespace + "/configmaps", name: name, key: key,
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
		case kubeapi.IsStatus(err, http.StatusForbidden) || kubeapi.IsStatus(err, http.StatusUnauthorized):
			return fmt.Errorf("%w: %v", ErrNotAllowed, err)
		case kubeapi.IsStatus(err, http.StatusGone):
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
	var cm configMap
	if err := w.c.Get(ctx, w.collection+"/"+w.name, &cm); err != nil {
		return "", err
	}
	if !w.following {
		w.following = true
		w.log.Info(Following)
	}
	w.lastFailed = ""
	w.found(cm, send)
	return cm.Metadata.ResourceVersion, nil
}

// watch follows the ConfigMap from resourceVersion rv until the watch
// cannot resume (it expired: 410), or ctx ends. Watched by name, as the
// runner's Role allows.
func (w *Watcher) watch(ctx context.Context, rv string, send func([]byte)) error {
	byName := url.Values{"fieldSelector": {"metadata.name=" + w.name}}
	return kubeapi.Follow(ctx, w.c, w.collection, byName, rv, func(typ kubeapi.EventType, cm configMap) {
		if typ != kubeapi.Deleted {
			w.found(cm, send)
		}
	})
}

// found sends the key's value when it changed.
func (w *Watcher) found(cm configMap, send func([]byte)) {
	data, ok := cm.Data[w.key]
	if !ok || w.haveData && data == w.lastData {
		return
	}
	w.lastData, w.haveData = data, true
	send([]byte(data))
}
