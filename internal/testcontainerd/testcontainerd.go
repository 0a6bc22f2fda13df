// Package testcontainerd runs a containerd of a test's own, with runc
// from Debian, to run vmop's images as a cluster node would: its config,
// root, state and socket live in a temporary directory, so nothing of the
// machine's (a system containerd included) is touched, and everything is
// gone after the test.
package testcontainerd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Namespace is the containerd namespace of the tests' images and
// containers.
const Namespace = "vmop-test"

// Containerd is a running containerd.
type Containerd struct {
	// Socket is its gRPC address.
	Socket string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

const depsHint = "run `make deps` (installs containerd and runc)"

// Start starts a containerd for t, stopped at t's cleanup. It skips t
// when containerd or runc is missing, unless VMOP_REQUIRE_CONTAINERD is set
// (make test sets it, so that a missing install fails rather than hides
// the tests).
func Start(t testing.TB) *Containerd {
	t.Helper()
	for _, bin := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("VMOP_REQUIRE_CONTAINERD") != "" {
				t.Fatalf("%s not found: %s", bin, depsHint)
			}
			t.Skipf("%s not found: %s", bin, depsHint)
		}
	}
	if os.Getuid() != 0 {
		t.Skip("containerd needs root")
	}
	// Short: the socket path must fit a sockaddr_un.
	dir, err := os.MkdirTemp("", "ctrd")
	if err != nil {
		t.Fatal(err)
	}
	c := &Containerd{Socket: filepath.Join(dir, "containerd.sock"), dir: dir, exited: make(chan struct{})}
	// CRI is off: tests here run containers with ctr, as the image issue
	// asks; a kubelet's node needs its own settings.
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Socket, c.Socket+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.cmd.Wait(); log.Close(); close(c.exited) }()
	t.Cleanup(func() { c.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := c.Ctr(context.Background(), "version").Run(); err == nil {
			return c
		}
		select {
		case <-c.exited:
			t.Fatalf("containerd exited at start:\n%s", c.Log())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer in 30 s:\n%s", c.Log())
		}
	}
}

// Log is containerd's own output so far.
func (c *Containerd) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "containerd.log"))
	return string(b)
}

// Ctr is a ctr command against this containerd, in Namespace.
func (c *Containerd) Ctr(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ctr", append([]string{"--address", c.Socket, "--namespace", Namespace}, args...)...)
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

// stop kills what still runs, stops containerd and removes its directory
// after unmounting what its snapshotter and shims left mounted.
func (c *Containerd) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := c.Ctr(ctx, "tasks", "list", "--quiet").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			c.Ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id).Run()
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) && c.Ctr(ctx, "tasks", "delete", id).Run() != nil {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	if out, err := c.Ctr(ctx, "containers", "list", "--quiet").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			c.Ctr(ctx, "containers", "delete", id).Run()
		}
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
	}
	unmountBelow(t, c.dir)
	// The shims keep runc's state under a fixed path per namespace; it is
	// empty once the tasks are gone (os.Remove leaves it when not).
	os.Remove(filepath.Join("/run/containerd/runc", Namespace))
	if err := os.RemoveAll(c.dir); err != nil {
		t.Errorf("removing containerd's directory: %v", err)
	}
}

// unmountBelow unmounts every mount under dir, deepest first.
func unmountBelow(t testing.TB, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("reading mounts: %v", err)
		return
	}
	var mounts []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mounts[i], err)
		}
	}
}
