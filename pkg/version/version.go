// Package version tells which build of vmop is running, and so which
// images belong to it: a plugin, operator or runner of version X works
// with the images of version X.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
)

// Version is set at build time with
// -ldflags "-X github.com/vmop/vmop/pkg/version.Version=v0.1.0".
var Version = ""

// Registry is where vmop's images are published; flags and a VM's
// spec.image name another (a mirror for air-gapped clusters).
const Registry = "ghcr.io/vmop"

// Names of vmop's images.
const (
	RunnerImage   = "vm-runner"
	OperatorImage = "vm-operator"
	FunctionImage = "kubectl-vm"
	// NodeImage is vm-node's, the node agent that install runs on every
	// node.
	NodeImage = "vm-node"
)

// Get returns the version of this build: the one set at build time, else
// the module version that go install recorded, else "devel".
func Get() string {
	if Version != "" {
		return Version
	}
	return buildVersion()
}

// buildVersion is the module's version from the build info, read once: the
// renderer asks for every VM it renders, and reading parses it again.
var buildVersion = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
})

// ImageTag is the tag of this build's images: its version, with each
// character that a tag cannot hold (such as the "+" of "+dirty") made "-".
// Never "latest": a renderer names the runner it was tested with.
func ImageTag() string { return Tag(Get()) }

// Tag is the image tag of version v.
func Tag(v string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, v)
}

// Image is the reference of this build's image name in registry; an empty
// registry means Registry.
func Image(registry, name string) string { return Ref(registry, name, ImageTag()) }

// Ref is the reference of image name with tag in registry; an empty
// registry means Registry.
func Ref(registry, name, tag string) string { return Repository(registry, name) + ":" + tag }

// Repository is the repository (no tag) of image name in registry, such
// as "ghcr.io/vmop/vm-runner"; an empty registry means Registry.
func Repository(registry, name string) string {
	if registry == "" {
		registry = Registry
	}
	return strings.TrimSuffix(registry, "/") + "/" + name
}

// ValidateRegistry checks a registry given to name vmop's images, such as
// "registry.example:5000/mirror/vmop".
func ValidateRegistry(registry string) error {
	if _, err := name.NewRepository(strings.TrimSuffix(registry, "/")+"/"+RunnerImage, name.StrictValidation); err != nil || strings.Contains(registry, ":/") {
		return fmt.Errorf("%q is not a registry with an optional path, such as registry.example:5000/vmop", registry)
	}
	return nil
}
