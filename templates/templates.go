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
)

// Standard is the template a VM uses when its config names none.
const Standard = "standard.tmpl"

//go:embed *.tmpl
var embedded embed.FS

// Read returns the template called name from the first of dirs that has
// it, else the embedded one.
func Read(name string, dirs ...string) ([]byte, string, error) {
	if name != filepath.Base(name) {
		return nil, "", errors.New("a template name must not contain a directory: " + name)
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
