package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
)

// Problem is something wrong with one document of an input.
type Problem struct {
	Source   string // file name, or "-" for stdin
	Document int    // from 1
	Object   string // the VirtualMachine's name, when known
	Field    string // the field path, when known
	Message  string
}

func (p Problem) String() string {
	s := fmt.Sprintf("%s: document %d: ", p.Source, p.Document)
	if p.Object != "" {
		s += p.Object + ": "
	}
	if p.Field != "" {
		s += p.Field + ": "
	}
	return s + p.Message
}

// StreamOptions tune Stream.
type StreamOptions struct {
	Options
	// Namespace is set on VirtualMachines that have none; one with another
	// namespace is a problem, as with kubectl apply -n.
	Namespace string
	// Warn receives warnings (fields accepted but ignored); may be nil.
	Warn func(Problem)
}

// Stream renders every VirtualMachine of a manifest stream to w and copies
// the other documents unchanged. It reads one document at a time, so memory
// does not grow with the stream. It goes on after a bad document to report
// every problem, except after one above manifest.MaxDocumentSize, whose
// end may never come; once there is one, it stops writing, and the output
// is not to be used. err is an I/O error that ended the stream early.
func Stream(r io.Reader, source string, w *manifest.Writer, opts StreamOptions) (problems []Problem, err error) {
	dr := manifest.NewReader(r)
	for {
		d, err := dr.Next()
		if errors.Is(err, io.EOF) {
			return problems, nil
		}
		if d == nil && err != nil {
			return problems, fmt.Errorf("%s: %w", source, err)
		}
		if err != nil {
			problems = append(problems, Problem{Source: source, Document: d.Index, Message: unwrapDocument(err)})
			continue
		}
		ps, err := renderDocument(d, source, w, len(problems) == 0, opts)
		if err != nil {
			return problems, err
		}
		problems = append(problems, ps...)
	}
}

// unwrapDocument drops the reader's "document N: " prefix, which Problem
// adds back.
func unwrapDocument(err error) string {
	if u := errors.Unwrap(err); u != nil {
		return u.Error()
	}
	return err.Error()
}

func renderDocument(d *manifest.Document, source string, w *manifest.Writer, write bool, opts StreamOptions) ([]Problem, error) {
	if !v1.IsVirtualMachine(d.APIVersion, d.Kind) {
		if d.APIVersion == "" || d.Kind == "" {
			return []Problem{{Source: source, Document: d.Index, Message: "not a Kubernetes object: apiVersion and kind are required"}}, nil
		}
		if write {
			return nil, w.WriteDocument(d)
		}
		return nil, nil
	}
	objs, problems, warnings := FromJSON(d.JSON, opts)
	for _, p := range warnings {
		if opts.Warn != nil {
			p.Source, p.Document = source, d.Index
			opts.Warn(p)
		}
	}
	for i := range problems {
		problems[i].Source, problems[i].Document = source, d.Index
	}
	if len(problems) > 0 || !write {
		return problems, nil
	}
	for _, o := range objs.List() {
		if err := w.WriteObject(o); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// FromJSON decodes a VirtualMachine given as JSON and renders it. The
// problems and warnings it returns name the object and field but not the
// source, which the caller knows.
func FromJSON(data []byte, opts StreamOptions) (objs *Objects, problems, warnings []Problem) {
	vm, err := v1.DecodeJSON(data)
	if err != nil {
		return nil, []Problem{{Object: nameOf(data), Message: err.Error()}}, nil
	}
	switch {
	case vm.Namespace == "":
		vm.Namespace = opts.Namespace
	case opts.Namespace != "" && vm.Namespace != opts.Namespace:
		return nil, []Problem{{Object: vm.Name, Field: "metadata.namespace",
			Message: fmt.Sprintf("%q does not match the namespace %q given with --namespace", vm.Namespace, opts.Namespace)}}, nil
	}
	objs, err = render(vm, opts.Options) // vm is ours: no copy
	var invalid *InvalidError
	if errors.As(err, &invalid) {
		for _, fe := range invalid.Errors {
			problems = append(problems, Problem{Object: vm.Name, Field: fe.Field, Message: fe.ErrorBody()})
		}
		return nil, problems, nil
	}
	if err != nil {
		return nil, []Problem{{Object: vm.Name, Message: err.Error()}}, nil
	}
	for _, msg := range objs.Warnings {
		warnings = append(warnings, Problem{Object: vm.Name, Message: msg})
	}
	return objs, nil, warnings
}

// nameOf finds a name for a document that did not decode.
func nameOf(data []byte) string {
	var m struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(data, &m) // a partial result is enough for a name
	return m.Metadata.Name
}
