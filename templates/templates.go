// Package templates holds vm-runner's qemu command templates (Go
// text/template), embedded in the binary. A file of the same name in an
// override directory replaces the embedded one, so that a VM type can be
// changed without a new runner image.
package templates

import (
	"embed"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Standard is the template a VM uses when its config names none.
const Standard = "standard.tmpl"

//go:embed *.tmpl
var embedded embed.FS

// vmOperatorStandard is VM-Operator's standard template, which its
// manifests name by path (/opt/vmrunner/templates/Standard-VM-latest.ftl.yaml):
// a FreeMarker template, whose place vmop's standard one takes.
var vmOperatorStandard = regexp.MustCompile(`^(.*/)?Standard-VM-[^/]*\.ftl\.yaml$`)

// IsVMOperatorStandard tells whether source names VM-Operator's standard
// template.
func IsVMOperatorStandard(source string) bool { return vmOperatorStandard.MatchString(source) }

// Resolve returns the template's name that a VM's runnerTemplate source
// selects: Standard for none and for VM-Operator's standard template,
// else source, which must be a file name.
func Resolve(source string) (string, error) {
	switch {
	case source == "" || IsVMOperatorStandard(source):
		return Standard, nil
	case strings.Contains(source, "/") || source == "." || source == "..":
		return "", errors.New("a template name must not contain a directory: " + source)
	}
	return source, nil
}

// Read returns the template that name selects (see Resolve) from the first
// of dirs that has it, else the embedded one.
func Read(name string, dirs ...string) ([]byte, string, error) {
	name, err := Resolve(name)
	if err != nil {
		return nil, "", err
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		b, err := os.ReadFile(p)
		if err == nil {
			return b, p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, "", err
		}
	}
	b, err := embedded.ReadFile(name)
	if err != nil {
		return nil, "", errors.New("no template " + name + " (embedded: " + Standard + ")")
	}
	return b, "embedded:" + name, nil
}
