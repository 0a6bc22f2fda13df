// Package testcontainerd runs a containerd of a test's own, with runc
// from Debian, to run vmop's images as a cluster node would: its config,
// root, state and socket live in a temporary directory, so nothing of the
// machine's (a system containerd included) is touched, and everything is
// gone after the test.
package testcontainerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/prereq"
)

// Namespace is the containerd namespace of the tests' images and
// containers.
const Namespace = "vmop-test"

// Containerd is a running containerd.
type Containerd struct {
	// Socket is its gRPC address.
	Socket string
	// Dir holds its config, root, state and log.
	Dir       string
	namespace string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// Options tune Run. The zero value runs containers with ctr only.
type Options struct {
	// Namespace is the one Ctr and Stop act in; empty means Namespace.
	Namespace string
	// CRI, when not empty, is the body of the CRI plugin's config section
	// (TOML): a kubelet's node needs it. Without it the plugin is off.
	CRI string
	// Parent is where its directory is made; empty means the system's
	// temporary directory. (Keep it short: the socket path must fit a
	// sockaddr_un.)
	Parent string
	// Dir, when not empty, is the directory of a containerd of these
	// options that was killed: Run starts a containerd again on its root
	// and state, as a node's containerd starts after a crash, with its
	// images, containers and snapshots. Parent is then unused.
	Dir string
}

const depsHint = "run `make deps` (installs containerd and runc)"

// Check says what is missing to run a containerd here.
func Check() error {
	for _, bin := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found: %s", bin, depsHint)
		}
	}
	if os.Getuid() != 0 {
		return errors.New("containerd needs root")
	}
	return nil
}

// Start starts a containerd for t, stopped at t's cleanup. Under -short it
// skips t; otherwise a missing install fails t (see test/harness/prereq).
func Start(t testing.TB) *Containerd {
	t.Helper()
	prereq.Installed(t, "root, containerd and runc", Check)
	c, err := Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// Run starts a containerd and waits until it answers.
func Run(opts Options) (*Containerd, error) {
	if opts.Namespace == "" {
		opts.Namespace = Namespace
	}
	dir := opts.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp(opts.Parent, "ctrd"); err != nil {
			return nil, err
		}
	}
	c := &Containerd{Socket: filepath.Join(dir, "containerd.sock"), Dir: dir, namespace: opts.Namespace, exited: make(chan struct{})}
	cri := `disabled_plugins = ["io.containerd.grpc.v1.cri"]`
	if opts.CRI != "" {
		cri = "[plugins.\"io.containerd.grpc.v1.cri\"]\n" + opts.CRI
	}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
%s
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Socket, c.Socket+".ttrpc", cri)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		return nil, err
	}
	// Appended to: a restarted containerd's log follows the killed one's.
	log, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		log.Close()
		if opts.Dir == "" {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	go func() { _ = c.cmd.Wait(); log.Close(); close(c.exited) }()
	err = eventually.UntilExit(context.Background(), c.exited, 30*time.Second, func(ctx context.Context) error {
		return c.Ctr(ctx, "version").Run()
	})
	if err == nil {
		return c, nil
	}
	select {
	case <-c.exited:
		err = fmt.Errorf("containerd exited at start:\n%s", c.Log())
	default:
		err = fmt.Errorf("containerd did not answer in 30 s (%w):\n%s", err, c.Log())
	}
	if opts.Dir != "" {
		// A restart leaves the directory, with what the killed containerd
		// had, to its first Containerd's Stop.
		_ = c.cmd.Process.Kill()
		<-c.exited
		return nil, err
	}
	_ = c.Stop()
	return nil, err
}

// Pid is containerd's process id.
func (c *Containerd) Pid() int { return c.cmd.Process.Pid }

// Exited is closed once containerd has exited.
func (c *Containerd) Exited() <-chan struct{} { return c.exited }

// Log is containerd's own output so far.
func (c *Containerd) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "containerd.log"))
	return string(b)
}

// Ctr is a ctr command against this containerd, in its namespace.
func (c *Containerd) Ctr(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ctr", append([]string{"--address", c.Socket, "--namespace", c.namespace}, args...)...)
}

// Import imports an image archive and returns the names of the images
// in it.
func (c *Containerd) Import(t testing.TB, archive string) []string {
	t.Helper()
	out, err := c.Ctr(context.Background(), "images", "import", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images import %s: %v\n%s", archive, err, out)
	}
	names, err := c.Ctr(context.Background(), "images", "list", "--quiet").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(names))
}

// PID is the host pid of a container's init process.
func (c *Containerd) PID(ctx context.Context, id string) (int, error) {
	out, err := c.Ctr(ctx, "tasks", "list").Output()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == id {
			var pid int
			_, err := fmt.Sscan(f[1], &pid)
			return pid, err
		}
	}
	return 0, fmt.Errorf("no task %s", id)
}

// Terminate stops containerd alone, as systemctl restart does (SIGTERM):
// its shims, and the containers they run, keep running.
func (c *Containerd) Terminate() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("containerd did not exit within 10s of SIGTERM")
	}
}

// Stop kills what still runs in its namespace, stops containerd and
// removes its directory after unmounting what its snapshotter and shims
// left mounted. It may be called more than once.
func (c *Containerd) Stop() error {
	// Each command gets its own time: one that hangs must not leave the
	// others none.
	ctr := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.Ctr(ctx, args...).Output()
	}
	select {
	case <-c.exited:
	default:
		if out, err := ctr("tasks", "list", "--quiet"); err == nil {
			for _, id := range strings.Fields(string(out)) {
				_, _ = ctr("tasks", "kill", "--all", "--signal", "SIGKILL", id)
				_ = eventually.Until(context.Background(), 10*time.Second, func(context.Context) error {
					_, err := ctr("tasks", "delete", id)
					return err
				})
			}
		}
		if out, err := ctr("containers", "list", "--quiet"); err == nil {
			for _, id := range strings.Fields(string(out)) {
				_, _ = ctr("containers", "delete", id)
			}
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	errs := UnmountBelow(c.Dir)
	// The shims keep runc's state under a fixed path per namespace; it is
	// empty once the tasks are gone (os.Remove leaves it when not).
	os.Remove(filepath.Join("/run/containerd/runc", c.namespace))
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("removing containerd's directory: %w", err))
	}
	return errors.Join(errs...)
}

// UnmountBelow unmounts every mount under dir, deepest first.
func UnmountBelow(dir string) []error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []error{fmt.Errorf("reading mounts: %w", err)}
	}
	var mounts []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	var errs []error
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mounts[i], err))
		}
	}
	return errs
}
