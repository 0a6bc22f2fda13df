// Package manifest reads and writes streams of Kubernetes manifests one
// document at a time, so that memory does not grow with the stream.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Document is one document of a stream.
type Document struct {
	// Index counts the documents of the stream from 1, as people do.
	Index int
	// Raw is the document as written (YAML or JSON).
	Raw []byte
	// JSON is the document converted to JSON.
	JSON []byte
	// APIVersion and Kind are read from the document.
	APIVersion, Kind string
}

// Reader splits a YAML or JSON stream into documents.
type Reader struct {
	r     *utilyaml.YAMLReader
	index int
}

// NewReader reads documents from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: utilyaml.NewYAMLReader(bufio.NewReaderSize(r, 64<<10))}
}

// Next returns the next non-empty document, or io.EOF at the end. An error
// about one document (bad YAML) names its index; the reader can go on after
// it. An error of the underlying reader ends the stream.
func (r *Reader) Next() (*Document, error) {
	for {
		raw, err := r.r.Read()
		if err != nil {
			return nil, err
		}
		r.index++
		if isEmpty(raw) {
			continue
		}
		// After an empty document, the reader keeps the separator line.
		for bytes.HasPrefix(raw, []byte("---")) {
			_, raw, _ = bytes.Cut(raw, []byte("\n"))
		}
		d := &Document{Index: r.index, Raw: raw}
		if d.JSON, err = YAMLToJSON(raw); err != nil {
			return d, fmt.Errorf("document %d: %w", d.Index, err)
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if len(d.JSON) == 0 || d.JSON[0] != '{' {
			return d, fmt.Errorf("document %d: %w", d.Index, errNotObject)
		}
		if err := json.Unmarshal(d.JSON, &tm); err != nil {
			return d, fmt.Errorf("document %d: %w", d.Index, err)
		}
		d.APIVersion, d.Kind = tm.APIVersion, tm.Kind
		return d, nil
	}
}

var errNotObject = errors.New("not a Kubernetes object (a YAML mapping with apiVersion and kind)")

// isEmpty tells whether a document holds only blank lines and comments.
func isEmpty(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) {
			return false
		}
	}
	return true
}
