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

	sigsjson "sigs.k8s.io/json"
)

// Document is one document of a stream.
type Document struct {
	// Index counts the documents of the stream from 1, as people do.
	Index int
	// Raw is the document as written (YAML or JSON), with CRLF line
	// breaks made LF.
	Raw []byte
	// JSON is the document converted to JSON.
	JSON []byte
	// APIVersion and Kind are read from the document.
	APIVersion, Kind string
}

// MaxDocumentSize bounds one document, in a stream or a config file. The
// API server takes request bodies of at most 3 MiB, so no object that can
// be applied is larger. Converting a document allocates up to some 200
// times its size (full YAML of many tiny nodes: 800 MiB for 4 MiB), so a
// bound of a few MiB, not tens, keeps that within reach of a laptop.
const MaxDocumentSize = 4 << 20

// ErrTooLarge is the error, wrapped with the limit, for input above a size
// limit.
var ErrTooLarge = errors.New("larger than the limit")

func tooLarge(limit int) error {
	return fmt.Errorf("%w of %d MiB", ErrTooLarge, limit>>20)
}

// ReadAll reads r to its end like io.ReadAll, but stops with an error
// after limit bytes rather than reading on.
func ReadAll(r io.Reader, limit int) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, tooLarge(limit)
	}
	return data, nil
}

// Reader splits a YAML or JSON stream into documents at "---" lines.
type Reader struct {
	br    *bufio.Reader
	index int
	// started: a "---" at the very start opens the first document rather
	// than ending an empty one.
	started bool
	eof     bool
}

// NewReader reads documents from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next non-empty document, or io.EOF at the end. An error
// about one document (bad YAML) names its index; the reader can go on after
// it, except after one above MaxDocumentSize. An error of the underlying
// reader, or a UTF-16 stream, ends the stream.
func (r *Reader) Next() (*Document, error) {
	for {
		raw, err := r.split()
		if errors.Is(err, ErrTooLarge) {
			// Its end may never come: the stream ends here.
			r.eof = true
			r.index++
			return &Document{Index: r.index}, fmt.Errorf("document %d: %w", r.index, err)
		}
		if err != nil {
			return nil, err
		}
		if isEmpty(raw) {
			continue
		}
		d := &Document{Index: r.index, Raw: raw}
		if d.JSON, err = YAMLToJSON(raw); err != nil {
			return d, fmt.Errorf("document %d: %w", d.Index, err)
		}
		if len(d.JSON) == 0 || d.JSON[0] != '{' {
			return d, fmt.Errorf("document %d: %w", d.Index, errNotObject)
		}
		if d.APIVersion, d.Kind, err = typeMeta(d.JSON); err != nil {
			return d, fmt.Errorf("document %d: %w", d.Index, err)
		}
		return d, nil
	}
}

// split returns the next document's lines, separator excluded, counting
// documents as people do: every "---" starts one.
func (r *Reader) split() ([]byte, error) {
	if r.eof {
		return nil, io.EOF
	}
	if !r.started {
		if err := r.skipBOM(); err != nil {
			return nil, err
		}
	}
	var doc []byte
	partial := false // the last chunk ended inside a long line
	for {
		line, err := r.br.ReadSlice('\n')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if !partial && isSeparator(line) {
			if !r.started && len(doc) == 0 {
				r.started = true
				continue
			}
			r.started = true
			r.index++
			return doc, nil
		}
		r.started = true
		if doc = appendLine(doc, line); len(doc) > MaxDocumentSize {
			return nil, fmt.Errorf("%w; the input after it is not read", tooLarge(MaxDocumentSize))
		}
		partial = errors.Is(err, bufio.ErrBufferFull)
		if errors.Is(err, io.EOF) {
			r.eof = true
			r.index++
			return doc, nil
		}
	}
}

// appendLine appends a line, or a piece of a long one, with CRLF made LF:
// YAML reads both alike, and documents copied to the output then have one
// kind of line break.
func appendLine(doc, line []byte) []byte {
	doc = append(doc, line...)
	if n := len(doc); n >= 2 && doc[n-2] == '\r' && doc[n-1] == '\n' {
		doc[n-2] = '\n'
		doc = doc[:n-1]
	}
	return doc
}

var utf8BOM = []byte("\ufeff")

var errUTF16 = errors.New("UTF-16 is not supported: save the input as UTF-8")

// skipBOM drops a UTF-8 byte order mark at the start, as kubectl does. A
// UTF-16 stream is refused: its "---" and line breaks are not the bytes
// split looks for.
func (r *Reader) skipBOM() error {
	head, _ := r.br.Peek(len(utf8BOM)) // a short or failed read shows in split
	switch {
	case bytes.HasPrefix(head, utf8BOM):
		_, err := r.br.Discard(len(utf8BOM))
		return err
	case bytes.HasPrefix(head, []byte{0xff, 0xfe}), bytes.HasPrefix(head, []byte{0xfe, 0xff}):
		return errUTF16
	}
	return nil
}

// isSeparator tells a "---" line (maybe with a comment) from content.
func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	if !ok {
		return false
	}
	rest = bytes.TrimSpace(rest)
	return len(rest) == 0 || rest[0] == '#'
}

// typeMeta reads the top-level apiVersion and kind of a JSON object, with
// their names' case as written (encoding/json would also take "Kind"). A
// value that is not a string reads as empty.
func typeMeta(js []byte) (apiVersion, kind string, err error) {
	var tm struct {
		APIVersion json.RawMessage `json:"apiVersion"`
		Kind       json.RawMessage `json:"kind"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return "", "", err
	}
	_ = json.Unmarshal(tm.APIVersion, &apiVersion)
	_ = json.Unmarshal(tm.Kind, &kind)
	return apiVersion, kind, nil
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
