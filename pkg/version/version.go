// Package version tells which build of vmop is running.
package version

import "runtime/debug"

// Version is set at build time with
// -ldflags "-X github.com/vmop/vmop/pkg/version.Version=v0.1.0".
var Version = ""

// Get returns the version of this build: the one set at build time, else
// the module version that go install recorded, else "devel".
func Get() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
