package debian_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// clientKeyPlaceholder in a config is replaced by the public key of the
// guest's SSH client key (see sshClientKey).
const clientKeyPlaceholder = "CLIENTKEY"

var (
	vmRunnerOnce sync.Once
	vmRunnerPath string
	vmRunnerErr  error
)

// vmRunnerBinary builds vm-runner once per test binary, for the commands
// that run beside the in-process runner (vm-runner connect).
func vmRunnerBinary(t *testing.T) string {
	t.Helper()
	vmRunnerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vm-runner-bin")
		if err != nil {
			vmRunnerErr = err
			return
		}
		vmRunnerPath = filepath.Join(dir, "vm-runner")
		out, err := exec.Command("go", "build", "-o", vmRunnerPath, "github.com/vmop/vmop/cmd/vm-runner").CombinedOutput()
		if err != nil {
			vmRunnerErr = err
			t.Logf("go build vm-runner: %s", out)
		}
	})
	require.NoError(t, vmRunnerErr)
	return vmRunnerPath
}

// sshClientKey makes a key pair for ssh into the guest and returns the
// private key's file; its public key replaces clientKeyPlaceholder in the
// configs written from now on.
func (g *guest) sshClientKey() string {
	g.t.Helper()
	for _, tool := range []string{"ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			g.t.Fatalf("%s not found: run make deps (openssh-client)", tool)
		}
	}
	key := filepath.Join(g.dir, "id_ed25519")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vmop-test-client", "-f", key).CombinedOutput()
	require.NoError(g.t, err, "ssh-keygen: %s", out)
	pub, err := os.ReadFile(key + ".pub")
	require.NoError(g.t, err)
	g.clientKey = strings.TrimSpace(string(pub))
	return key
}

// ssh runs the real ssh client as user in the guest, through vm-runner
// connect to the guest's port 22 as its ProxyCommand, with the key of
// sshClientKey, and returns what the command printed.
func (g *guest) ssh(key, user string, command ...string) (string, error) {
	g.t.Helper()
	args := []string{
		"-F", "/dev/null", // not the machine's or the user's config
		"-o", "ProxyCommand=" + vmRunnerBinary(g.t) + " connect --port 22 -c " + g.config,
		"-o", "HostKeyAlias=vm.deb-bios",
		"-o", "UserKnownHostsFile=" + filepath.Join(g.dir, "known_hosts"),
		"-o", "StrictHostKeyChecking=accept-new",
		"-o", "BatchMode=yes",
		"-o", "IdentitiesOnly=yes",
		"-i", key, "-l", user, "deb-bios",
	}
	cmd := exec.CommandContext(g.t.Context(), "ssh", append(args, command...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), &sshError{err: err, stderr: stderr.String()}
	}
	return string(out), nil
}

type sshError struct {
	err    error
	stderr string
}

func (e *sshError) Error() string { return "ssh: " + e.err.Error() + ": " + e.stderr }

func (e *sshError) Unwrap() error { return e.err }
