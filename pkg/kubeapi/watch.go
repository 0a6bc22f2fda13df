package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// EventType is the kind of change that Handler.Apply gets.
type EventType string

// The changes that a watch reports.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
)

// Handler receives what Watch sees, from one goroutine.
type Handler[T any] interface {
	// Replace gives all objects, after each list.
	Replace(objs []T)
	// Apply gives a change since the last list.
	Apply(typ EventType, obj T)
}

const (
	// watchTimeout is the watches' timeoutSeconds: the API server ends a
	// watch after it, and Watch watches again from where it was.
	watchTimeout = 5 * time.Minute
	// watchGrace is how much longer than watchTimeout a watch may run
	// before Watch gives up on it as hung and lists again.
	watchGrace = time.Minute
	// The delay before listing again after a failure: doubled after each
	// one, back to the least once a watch works.
	minBackoff = 200 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Watch keeps h informed of the objects of the collection at path (e.g.
// /api/v1/pods) that query selects (fieldSelector, labelSelector): it lists
// them and passes them to h.Replace, then watches from the list's
// resourceVersion and passes each change to h.Apply. A watch that ends is
// resumed where it was; after any failure, or when the API server no longer
// has the changes since the last resourceVersion (410 Gone), Watch lists
// again, after a backoff. It logs each new failure once with log, and
// returns only when ctx ends, with nil. Objects are decoded into T with
// encoding/json.
func Watch[T any](ctx context.Context, c *Client, path string, query url.Values, h Handler[T], log *slog.Logger) error {
	delay := minBackoff
	failed := "" // the last failure logged, not to log it again
	for {
		rv, err := list(ctx, c, path, query, h)
		if err == nil {
			err = follow(ctx, c, path, query, rv, h, func() {
				delay = minBackoff
				if failed != "" {
					log.Info("watch works again", "path", path)
					failed = ""
				}
			})
		}
		var st *StatusError
		switch {
		case ctx.Err() != nil: // the end, no failure
		case errors.As(err, &st) && st.Code == http.StatusGone:
			log.Debug("watch expired: listing again", "path", path, "err", err)
		case err.Error() != failed:
			log.Warn("list or watch failed: listing again", "path", path, "err", err, "after", delay)
			failed = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, maxBackoff)
	}
}

// Follow passes the changes of the collection at path (query selects
// them; fieldSelector metadata.name=NAME follows one object) from
// resourceVersion rv on to apply, watching again where it was when the
// API server ends a watch. It returns when ctx ends (nil) or a watch
// fails: a *StatusError with code 410 when rv is too old, and the caller
// reads the object again.
func Follow[T any](ctx context.Context, c *Client, path string, query url.Values, rv string, apply func(EventType, T)) error {
	return follow(ctx, c, path, query, rv, applyFunc[T](apply), func() {})
}

// applyFunc is a Handler of changes alone.
type applyFunc[T any] func(EventType, T)

func (f applyFunc[T]) Replace([]T)                {}
func (f applyFunc[T]) Apply(typ EventType, obj T) { f(typ, obj) }

// follow watches from rv until ctx ends or a watch fails, calling works
// each time a watch worked.
func follow[T any](ctx context.Context, c *Client, path string, query url.Values, rv string, h Handler[T], works func()) error {
	for {
		var ok bool
		var err error
		rv, ok, err = watch(ctx, c, path, query, rv, h)
		if ok {
			works()
		}
		switch {
		case ctx.Err() != nil:
			return nil //nolint:nilerr // the end of ctx is no failure, whatever the watch says
		case err != nil:
			return err
		}
	}
}

// list gets all objects, passes them to h.Replace and returns the list's
// resourceVersion. It decodes the list as a stream, an item at a time.
func list[T any](ctx context.Context, c *Client, path string, query url.Values, h Handler[T]) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, path, query, "", nil)
	if err != nil {
		return "", fmt.Errorf("list %s: %w", path, err)
	}
	defer resp.Body.Close()
	var (
		meta  objectMeta
		items []T
	)
	dec := json.NewDecoder(resp.Body)
	err = walkObject(dec, func(key string) error {
		switch key {
		case "metadata":
			return dec.Decode(&meta)
		case "items":
			return walkArray(dec, func() error {
				var obj T
				if err := dec.Decode(&obj); err != nil {
					return err
				}
				items = append(items, obj)
				return nil
			})
		}
		var skip json.RawMessage // kind, apiVersion
		return dec.Decode(&skip)
	})
	if err != nil {
		return "", fmt.Errorf("list %s: %w", path, err)
	}
	h.Replace(items)
	return meta.ResourceVersion, nil
}

// walkObject reads a JSON object from dec, calling f with each key to
// decode its value.
func walkObject(dec *json.Decoder, f func(key string) error) error {
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		if err := f(key.(string)); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

// walkArray reads a JSON array from dec, calling f to decode each element.
// null is an empty array.
func walkArray(dec *json.Decoder, f func() error) error {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if tok != json.Delim('[') {
		return fmt.Errorf("got %v where an array was expected", tok)
	}
	for dec.More() {
		if err := f(); err != nil {
			return err
		}
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err == nil && tok != want {
		err = fmt.Errorf("got %v where %v was expected", tok, want)
	}
	return err
}

// objectMeta is what Watch reads of an object's or a list's metadata.
type objectMeta struct {
	ResourceVersion string `json:"resourceVersion"`
}

// watch watches from resourceVersion rv until the API server ends the watch
// (nil) or it fails, passing changes to h. It returns the resourceVersion
// reached, and whether the watch worked: got an event or ended normally.
func watch[T any](ctx context.Context, c *Client, path string, query url.Values, rv string, h Handler[T]) (string, bool, error) {
	q := url.Values{}
	maps.Copy(q, query)
	q.Set("watch", "1")
	q.Set("resourceVersion", rv)
	q.Set("allowWatchBookmarks", "true")
	q.Set("timeoutSeconds", strconv.Itoa(int(watchTimeout.Seconds())))
	ctx, cancel := context.WithTimeout(ctx, watchTimeout+watchGrace)
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, path, q, "", nil)
	if err != nil {
		return rv, false, fmt.Errorf("watch %s: %w", path, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	works := false
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, true, nil
			}
			return rv, works, fmt.Errorf("watch %s: %w", path, err)
		}
		var meta struct {
			Metadata objectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(ev.Object, &meta); err != nil {
			return rv, works, fmt.Errorf("watch %s: %s event: %w", path, ev.Type, err)
		}
		switch ev.Type {
		case string(Added), string(Modified), string(Deleted):
			var obj T
			if err := json.Unmarshal(ev.Object, &obj); err != nil {
				return rv, works, fmt.Errorf("watch %s: %s event: %w", path, ev.Type, err)
			}
			h.Apply(EventType(ev.Type), obj)
		case "BOOKMARK": // only a newer resourceVersion
		case "ERROR":
			var st StatusError
			if err := json.Unmarshal(ev.Object, &st); err != nil {
				return rv, works, fmt.Errorf("watch %s: ERROR event: %w", path, err)
			}
			return rv, works, fmt.Errorf("watch %s: %w", path, &st)
		default:
			return rv, works, fmt.Errorf("watch %s: unknown event type %q", path, ev.Type)
		}
		rv, works = meta.Metadata.ResourceVersion, true
	}
}
