// Package prereq states what a test needs beyond plain Go (root, programs,
// installed files, the control plane), so that the test tiers stay honest:
// under `go test -short` (make unit) such a test skips and says what it
// needs; in the full run (make test) a missing prerequisite fails the test
// with what to install, never skips, so that no suite silently stops running.
package prereq

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vmop/vmop/pkg/kvm"
)

// depsHint is how to get what the tests need, in every failure message.
const depsHint = "run `make deps` as root"

// Beyond skips t under -short: t needs what it names (e.g. "root and
// qemu-system-x86_64"), more than plain Go. Every other function here calls
// it; call it alone for needs they do not check (network access to the
// module proxy, a long run).
func Beyond(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: not run with -short (make unit); make test runs it", what)
	}
}

// Root needs t to run as root, for why (e.g. "makes network namespaces").
func Root(t testing.TB, why string) {
	t.Helper()
	Beyond(t, "root ("+why+")")
	if os.Geteuid() != 0 {
		t.Fatalf("needs root (%s): run the tests as root, or only make unit", why)
	}
}

// Commands needs each named program on PATH; pkg is the Debian package
// that holds them, for the message.
func Commands(t testing.TB, pkg string, names ...string) {
	t.Helper()
	Beyond(t, describe(names, pkg))
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Fatalf("needs %s (Debian: %s): %v: %s", n, pkg, err, depsHint)
		}
	}
}

// Files needs each of paths to exist; pkg is the Debian package that
// installs them.
func Files(t testing.TB, pkg string, paths ...string) {
	t.Helper()
	Beyond(t, describe(paths, pkg))
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("needs %s (Debian: %s): %v: %s", p, pkg, err, depsHint)
		}
	}
}

// ControlPlane needs the named control-plane binaries (etcd,
// kube-apiserver, ...) from $VMOP_KUBE_BIN_DIR or the cache of
// hack/build-control-plane.sh, which test/harness/testcluster fills on
// first use (minutes).
func ControlPlane(t testing.TB, binaries ...string) {
	t.Helper()
	Beyond(t, describe(binaries, "a test control plane"))
}

// Installed needs what check finds missing (its error says what to
// install); what names it for -short, e.g. "root, containerd and runc".
func Installed(t testing.TB, what string, check func() error) {
	t.Helper()
	Beyond(t, what)
	if err := check(); err != nil {
		t.Fatalf("needs %s: %v", what, err)
	}
}

// ShortMain is for a TestMain whose setup (a node, built images) needs
// what it names: under -short it says that the package is skipped and
// returns true, and TestMain then exits 0 without setting up.
func ShortMain(what string) bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		fmt.Printf("skipping every test of the package: needs %s: not run with -short (make unit); make test runs them\n", what)
		return true
	}
	return false
}

// KVM skips t when this machine has no usable KVM. That is a fact of the
// hardware (or of the virtual machine the tests run in), not a missing
// install, so it skips in the full run too; callers test TCG as well.
func KVM(t testing.TB) {
	t.Helper()
	Beyond(t, "KVM")
	if err := kvm.Usable(); err != nil {
		t.Skipf("no usable KVM on this machine (hardware, not an install): %v", err)
	}
}

func describe(names []string, pkg string) string {
	return strings.Join(names, ", ") + " (" + pkg + ")"
}
