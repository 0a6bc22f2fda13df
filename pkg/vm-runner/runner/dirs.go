package runner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/runnerdata"
	"github.com/vmop/vmop/pkg/vmpod"
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
		return vmpod.DataDir
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
	path := filepath.Join(dataDir, runnerdata.UUIDFile)
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
	if err := runnerdata.WriteFile(path, 0o644, func(w io.Writer) error {
		_, err := io.WriteString(w, id+"\n")
		return err
	}); err != nil {
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

// adoptFiles makes the regular files under dir that another user wrote
// (a root runner of a vmop before VM pods ran unprivileged) the files of
// uid: a copy by uid replaces each. The pod's fsGroup lets uid read them
// and write in their directories, but programs such as swtpm also chmod
// their state, which only its owner may.
func adoptFiles(dir string, uid int) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) == uid {
			return nil
		}
		if err := copyFile(path, path, fi.Mode().Perm()); err != nil {
			return fmt.Errorf("taking over %s, which another user wrote: %w (the pod's fsGroup must give the runner its data)", path, err)
		}
		return nil
	})
}

// dataRoomMin is the room the data directory needs for swtpm to save the
// TPM's state: it writes a new copy and renames it over the old one.
const dataRoomMin = 256 << 10

// dataFull names the data volume, and what to do, in an error that a
// full one caused.
func dataFull(dataDir string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: the VM's data volume (%s) is full; free room on it or grow its claim", err, dataVolume(dataDir))
	}
	return err
}

// dataRoomLow says, when the data directory has less than dataRoomMin
// free, what that means; "" when there is room, or when statfs fails.
func dataRoomLow(dataDir string) string {
	var st unix.Statfs_t
	if unix.Statfs(dataDir, &st) != nil {
		return ""
	}
	free := st.Bavail * uint64(st.Bsize)
	if free >= dataRoomMin {
		return ""
	}
	return fmt.Sprintf("The VM's data volume (%s) has %d KiB free: the TPM cannot save changes to its state "+
		"(what it saved before is kept). Free room on it or grow its claim", dataVolume(dataDir), free>>10)
}

// dataVolume names the data directory and, in a pod, its claim (the
// StatefulSet's: the template's name, then the pod's).
func dataVolume(dataDir string) string {
	if host, err := os.Hostname(); err == nil && inPod() {
		return dataDir + ", claim " + vmpod.DataVolume + "-" + host
	}
	return dataDir
}
