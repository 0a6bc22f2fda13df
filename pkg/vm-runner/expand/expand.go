// Package expand is the vm-runner-template program: it executes a qemu
// command template (Go text/template) for a runner.Machine and writes
// qemu's arguments. It runs as a process of its own, for a moment at each
// start of qemu, so that vm-runner, which lives as long as its VM, does
// not link text/template: a reachable call of reflect's MethodByName, as
// text/template makes, has the Go linker keep every exported method of
// every type in an interface, which was 6 MB of the runner's 20 and 2 MiB
// of its memory in every VM's pod.
package expand

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/template"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/runner/templates"
)

var funcs = template.FuncMap{
	// opt makes a value safe inside a qemu option list.
	"opt":   func(s string) string { return strings.ReplaceAll(s, ",", ",,") },
	"mib":   func(s runnerconfig.Size) int64 { return s.Bytes >> 20 },
	"deref": func(p *int32) int32 { return *p },
	"seq":   func(n int32) []struct{} { return make([]struct{}, max(n, 0)) },
}

// Template is a parsed command template.
type Template struct {
	t      *template.Template
	source string
}

// Load reads the template name (the standard one when empty), preferring
// the override directories.
func Load(name string, dirs ...string) (*Template, error) {
	text, source, err := templates.Read(name, dirs...)
	if err != nil {
		return nil, err
	}
	t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", source, err)
	}
	return &Template{t: t, source: source}, nil
}

// Args executes the template for a machine and splits its lines into
// qemu's arguments.
func (t *Template) Args(m *runner.Machine) ([]string, error) {
	var out bytes.Buffer
	if err := t.t.Execute(&out, m); err != nil {
		return nil, fmt.Errorf("template %s: %w", t.source, err)
	}
	var args []string
	for line := range strings.Lines(out.String()) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		opt, value, ok := strings.Cut(line, " ")
		args = append(args, opt)
		if ok {
			args = append(args, strings.TrimSpace(value))
		}
	}
	return args, nil
}

// Main is vm-runner-template: it reads a runner.TemplateRequest from in
// and writes the arguments as a JSON array to out, or what is wrong to
// errOut; it returns the exit code.
func Main(in io.Reader, out, errOut io.Writer) int {
	var req runner.TemplateRequest
	args, err := func() ([]string, error) {
		if err := json.NewDecoder(in).Decode(&req); err != nil {
			return nil, fmt.Errorf("vm-runner-template: the request on stdin: %w", err)
		}
		if req.Machine == nil || req.Machine.VM == nil {
			return nil, errors.New("vm-runner-template: the request on stdin has no machine")
		}
		t, err := Load(req.Template, req.Dirs...)
		if err != nil {
			return nil, err
		}
		return t.Args(req.Machine)
	}()
	if err == nil {
		err = json.NewEncoder(out).Encode(args)
	}
	if err != nil {
		fmt.Fprintln(errOut, err)
		return 1
	}
	return 0
}
