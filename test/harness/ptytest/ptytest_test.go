package ptytest_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/term"

	"github.com/vmop/vmop/test/harness/ptytest"
)

func TestOpen(t *testing.T) {
	pty, tty := ptytest.Open(t)
	require.True(t, term.IsTerminal(int(tty.Fd())))
	w, h, err := term.GetSize(int(tty.Fd()))
	require.NoError(t, err)
	require.Equal(t, [2]int{80, 24}, [2]int{w, h})
	ptytest.Resize(t, pty, 132, 43)
	w, h, err = term.GetSize(int(tty.Fd()))
	require.NoError(t, err)
	require.Equal(t, [2]int{132, 43}, [2]int{w, h})

	// What the program writes, the test reads.
	_, err = tty.WriteString("hello")
	require.NoError(t, err)
	buf := make([]byte, 16)
	n, err := pty.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf[:n]))
}
