package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// Output formats.
const (
	FormatYAML = "yaml"
	FormatJSON = "json"
)

// Formats lists the output formats, for flag help and errors.
var Formats = []string{FormatYAML, FormatJSON}

// Writer writes objects as a YAML stream ("---" between documents) or as
// one JSON List whose items are written as they come.
type Writer struct {
	w      *bufio.Writer
	format string
	n      int
	yaml   emitter
}

// NewWriter writes in format to w. Call Close at the end.
func NewWriter(w io.Writer, format string) (*Writer, error) {
	switch format {
	case FormatYAML, FormatJSON:
	default:
		return nil, fmt.Errorf("unknown output format %q: use one of %v", format, Formats)
	}
	return &Writer{w: bufio.NewWriterSize(w, 64<<10), format: format}, nil
}

// WriteObject writes a Kubernetes object (typed, or a map) as a manifest:
// without its top-level status, which only a cluster writes.
func (w *Writer) WriteObject(obj any) error {
	if w.format == FormatYAML {
		y, err := w.yaml.marshal(obj, true)
		if err != nil {
			return err
		}
		return w.writeYAML(y)
	}
	b, err := manifestJSON(obj)
	if err != nil {
		return err
	}
	return w.writeJSON(b)
}

// WriteDocument writes a document of an input stream; YAML is copied as
// written, comments included.
func (w *Writer) WriteDocument(d *Document) error {
	if w.format == FormatYAML {
		return w.writeYAML(d.Raw)
	}
	return w.writeJSON(d.JSON)
}

func (w *Writer) writeYAML(y []byte) error {
	if w.n > 0 {
		w.w.WriteString("---\n")
	}
	w.n++
	w.w.Write(y)
	if len(y) > 0 && y[len(y)-1] != '\n' {
		w.w.WriteByte('\n')
	}
	return nil
}

func (w *Writer) writeJSON(b []byte) error {
	if w.n == 0 {
		w.w.WriteString("{\n    \"apiVersion\": \"v1\",\n    \"kind\": \"List\",\n    \"items\": [\n")
	} else {
		w.w.WriteString(",\n")
	}
	w.n++
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "        ", "    "); err != nil {
		return err
	}
	w.w.WriteString("        ")
	w.w.Write(buf.Bytes())
	return nil
}

// Close ends the stream and flushes it. It writes nothing more when an
// error made the caller stop early; the output is then not to be used.
func (w *Writer) Close() error {
	if w.format == FormatJSON {
		if w.n == 0 {
			w.w.WriteString("{\n    \"apiVersion\": \"v1\",\n    \"kind\": \"List\",\n    \"items\": [")
		}
		w.w.WriteString("\n    ]\n}\n")
	}
	return w.w.Flush()
}

// WriteObjects writes objs to w in format (FormatYAML or FormatJSON), as
// one stream: what a command's -o prints.
func WriteObjects(w io.Writer, format string, objs ...any) error {
	mw, err := NewWriter(w, format)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := mw.WriteObject(obj); err != nil {
			return err
		}
	}
	return mw.Close()
}
