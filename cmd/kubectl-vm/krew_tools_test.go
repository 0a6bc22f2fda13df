package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/krewdist"
	"github.com/vmop/vmop/test/harness/prereq"
)

// krewVersion is the krew that TestKrewInstall installs with. It is built
// in a module of its own: its go.mod pins old Kubernetes libraries.
const krewVersion = "v0.4.4"

// buildKrew builds krew into a temporary directory from the module proxy
// (or the module cache).
// "go install krew@version" would be shorter but looks up deprecations in
// the module's version list, which some proxies do not serve.
func buildKrew(t *testing.T) string {
	t.Helper()
	prereq.Beyond(t, "the module proxy, to build krew "+krewVersion)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"mod", "init", "krewbuild"},
		{"get", "sigs.k8s.io/krew/cmd/krew@" + krewVersion},
		{"build", "-o", dir, "sigs.k8s.io/krew/cmd/krew"},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("krew %s cannot be built here: go %s: %v\n%s", krewVersion, strings.Join(args, " "), err, out)
		}
	}
	return filepath.Join(dir, "krew")
}

// TestKrewInstall builds the krew release with "make krew" and installs
// it with krew as its manifest tells developers to, with a KREW_ROOT of
// its own: the installed plugin must run, also as "kubectl vm". Only this
// machine's platform is built (KREW_PLATFORMS): the other three are whole
// cross-builds of the plugin, a quarter hour of a cold run on 2 cores.
func TestKrewInstall(t *testing.T) {
	krew := buildKrew(t)
	dist := t.TempDir()
	host := runtime.GOOS + "/" + runtime.GOARCH
	r := runCmd(t, "", moduleRoot, "make", "krew", "VERSION="+testVersion, "DIST="+dist, "KREW_PLATFORMS="+host)
	require.Zero(t, r.code, "%s\n%s", r.stdout, r.stderr)

	krewdist.Check(t, dist, testVersion)

	krewRoot := t.TempDir()
	krewEnv := []string{"KREW_ROOT=" + krewRoot}
	r = runCmdEnv(t, krewEnv, "", t.TempDir(), krew, "install",
		"--manifest="+filepath.Join(dist, "vm.yaml"),
		"--archive="+filepath.Join(dist, "kubectl-vm_"+runtime.GOOS+"_"+runtime.GOARCH+".tar.gz"))
	require.Zero(t, r.code, "%s\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "Installed plugin: vm")
	require.FileExists(t, filepath.Join(krewRoot, "store", "vm", testVersion, "LICENSE"))

	installed := filepath.Join(krewRoot, "bin", "kubectl-vm")
	r = runCmd(t, "", t.TempDir(), installed, "version", "--client")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "kubectl-vm "+testVersion+"\n"+images, r.stdout)

	// PATH as krew tells users to set it, without binDir.
	pathEnv := []string{"PATH=" + filepath.Dir(installed) + string(os.PathListSeparator) + os.Getenv("PATH")}
	r = runCmdEnv(t, pathEnv, "", t.TempDir(), kubectl(t), "plugin", "list", "--name-only=false")
	require.Contains(t, strings.Split(r.stdout, "\n"), installed, r.stderr)
	r = runCmdEnv(t, pathEnv, "", t.TempDir(), kubectl(t), "vm", "version", "--client")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "kubectl-vm "+testVersion+"\n"+images, r.stdout)
}
