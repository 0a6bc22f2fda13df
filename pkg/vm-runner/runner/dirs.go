package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/vmop/vmop/pkg/runnerconfig"
)

// inPod tells whether the runner runs in a Kubernetes pod.
func inPod() bool { return os.Getenv("KUBERNETES_SERVICE_HOST") != "" }

// DataDir is where the VM's state lives (firmware variables, TPM state,
// machine uuid): the config's dataDir, in a pod /var/local/vm-data, else
// $XDG_DATA_HOME/vmrunner/<vm>.
func DataDir(c *runnerconfig.Config) string {
	if c.DataDir != "" {
		return c.DataDir
	}
	if inPod() {
		return runnerconfig.DataDir
	}
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(base, "vmrunner", c.VM.Name)
}

// RuntimeDir holds the sockets and other files of one run: the config's
// runtimeDir, else $XDG_RUNTIME_DIR/vmrunner/<vm>, else
// /tmp/vmrunner-<uid>/<vm>.
func RuntimeDir(c *runnerconfig.Config) string {
	if c.RuntimeDir != "" {
		return c.RuntimeDir
	}
	if base := os.Getenv("XDG_RUNTIME_DIR"); base != "" {
		return filepath.Join(base, "vmrunner", c.VM.Name)
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("vmrunner-%d", os.Getuid()), c.VM.Name)
}

// machineUUID is the config's uuid, else the one kept in the data
// directory, made on the first start: licenses may depend on it.
func machineUUID(c *runnerconfig.Config, dataDir string) (string, error) {
	if c.VM.UUID != "" {
		return c.VM.UUID, nil
	}
	path := filepath.Join(dataDir, "uuid.txt")
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if _, err := uuid.Parse(id); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	id := uuid.NewString()
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", err
	}
	return id, nil
}

// isBlockDevice tells a raw disk given as "resource" that is a device
// from one that is a file.
func isBlockDevice(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeDevice != 0
}
