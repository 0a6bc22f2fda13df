package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmop/vmop/pkg/snapshotpush"
)

// Export is one disk of a snapshot as the snapshot pod serves it: the
// first Size bytes of Path (the snapshot claim's block device, or its
// image file) under the NBD export Name on Port.
type Export struct {
	Name string
	Path string
	Size int64
	Port int
}

// ParseExport reads NAME=PATH:SIZE; the port is the caller's.
func ParseExport(s string) (Export, error) {
	name, rest, ok := strings.Cut(s, "=")
	i := strings.LastIndexByte(rest, ':')
	if !ok || name == "" || i <= 0 {
		return Export{}, fmt.Errorf("export %q: want NAME=PATH:SIZE", s)
	}
	size, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil || size <= 0 {
		return Export{}, fmt.Errorf("export %q: the size must be a number of bytes above 0", s)
	}
	return Export{Name: name, Path: rest[:i], Size: size}, nil
}

// stopWait bounds qemu-nbd's exit after SIGTERM: it flushes the disk.
const stopWait = time.Minute

// Server serves a snapshot's disks for the VM's qemu to push them.
type Server struct {
	// QemuNBD is the program, found on PATH when empty.
	QemuNBD string
	// Address is where it listens; all of the pod's addresses when empty.
	Address string
	Exports []Export
	PSK     snapshotpush.PSK
	// Log takes qemu-nbd's output and what Serve does.
	Log io.Writer
}

// Serve runs one qemu-nbd per export, with TLS on the PSK, writable by
// one client, until stop delivers (kubectl vm snapshot closes stdin when
// the VM's qemu has pushed its copy) or ctx ends; then it stops them and
// syncs each disk. A qemu-nbd that ends early ends Serve with its error.
func (s Server) Serve(ctx context.Context, stop <-chan struct{}) error {
	qemuNBD, exports, log := s.QemuNBD, s.Exports, s.Log
	if qemuNBD == "" {
		qemuNBD = "qemu-nbd"
	}
	address := s.Address
	if address == "" {
		address = "0.0.0.0"
	}
	dir, err := s.PSK.WriteDir("")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	type end struct {
		name string
		err  error
	}
	ended := make(chan end, len(exports))
	var running []*exec.Cmd
	defer func() {
		for _, cmd := range running {
			_ = cmd.Process.Kill()
		}
	}()
	for _, e := range exports {
		if err := ensureFile(e.Path, e.Size); err != nil {
			return fmt.Errorf("export %s: %w", e.Name, err)
		}
		opts, err := rawImageOpts(e.Path, e.Size)
		if err != nil {
			return fmt.Errorf("export %s: %w", e.Name, err)
		}
		cmd := exec.Command(qemuNBD,
			"--object", "tls-creds-psk,id=tls0,endpoint=server,dir="+dir,
			"--tls-creds", "tls0",
			"--persistent", "--shared", "1",
			"--bind", address, "--port", strconv.Itoa(e.Port), "--export-name", e.Name,
			"--cache", "none", "--aio", "native", "--discard", "unmap", "--detect-zeroes", "unmap",
			"--image-opts", opts)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("export %s: %w", e.Name, err)
		}
		running = append(running, cmd)
		go func() { ended <- end{e.Name, cmd.Wait()} }()
		fmt.Fprintf(log, "serving %s (%d bytes of %s) on port %d\n", e.Name, e.Size, e.Path, e.Port)
	}
	select {
	case e := <-ended:
		return fmt.Errorf("export %s: qemu-nbd ended early: %v", e.name, e.err)
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
	}
	// qemu-nbd flushes the disk and exits 0 on SIGTERM.
	var errs []error
	for _, cmd := range running {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	timeout := time.After(stopWait)
	for range running {
		select {
		case e := <-ended:
			if e.err != nil {
				errs = append(errs, fmt.Errorf("export %s: qemu-nbd: %w", e.name, e.err))
			}
		case <-timeout:
			return fmt.Errorf("qemu-nbd did not stop within %s", stopWait)
		}
	}
	running = nil
	for _, e := range exports {
		if err := digHoles(e.Path); err != nil {
			errs = append(errs, err)
		}
		if err := syncPath(e.Path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
