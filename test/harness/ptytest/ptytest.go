// Package ptytest opens pseudo-terminals for tests that run a program as
// a user at a terminal would: raw mode, window sizes and SIGWINCH work as
// they do there.
package ptytest

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Open returns a new pseudo-terminal's two ends, closed when t ends: the
// program gets the terminal (tty) as its stdin, stdout and stderr, the
// test types on and reads from the other end (pty).
func Open(t testing.TB) (pty, tty *os.File) {
	t.Helper()
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { pty.Close() })
	fd := int(pty.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pseudo-terminal's number: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open the terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	Resize(t, pty, 80, 24)
	return pty, tty
}

// Resize sets the terminal's size, as a terminal emulator does when its
// window changes: the terminal's foreground process group gets SIGWINCH.
func Resize(t testing.TB, pty *os.File, cols, rows uint16) {
	t.Helper()
	if err := unix.IoctlSetWinsize(int(pty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); err != nil {
		t.Fatalf("resize the terminal: %v", err)
	}
}
