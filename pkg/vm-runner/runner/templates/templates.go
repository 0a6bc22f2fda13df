// Package templates holds the qemu command templates (Go text/template)
// that package runner executes (LoadTemplate), embedded in vm-runner. A
// file of the same name in an override directory replaces the embedded
// one, so that a VM type can be changed without a new runner image.
package templates

import (
	"embed"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// Standard is the template a VM uses when its config names none.
const Standard = v1.StandardTemplate

//go:embed *.tmpl
var embedded embed.FS

// Read returns the template that name selects (v1.TemplateName: the
// rule of a VM's spec.runnerTemplate.source) from the first of dirs that
// has it, else the embedded one.
func Read(name string, dirs ...string) ([]byte, string, error) {
	name, err := v1.TemplateName(name)
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
