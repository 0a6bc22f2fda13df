package console

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/remotecommand"
)

func TestAttachWatch(t *testing.T) {
	var out bytes.Buffer
	announced := 0
	w := &attachWatch{out: &out, announce: func() { announced++ }}
	for _, s := range []string{"Attached to the serial ", "console of vm web; Ctrl-] to leave\r\nlogin: ", "root\r\n"} {
		n, err := w.Write([]byte(s))
		require.NoError(t, err)
		require.Equal(t, len(s), n)
	}
	require.Equal(t, 1, announced)
	require.Equal(t, "login: root\r\n", out.String(), "the banner is replaced by the announcement")
	before, attached := w.result()
	require.True(t, attached)
	require.Empty(t, before)

	out.Reset()
	w = &attachWatch{out: &out, announce: func() { t.Fatal("announced a refusal") }}
	_, _ = w.Write([]byte("vm-runner serial: the serial console is in use: alice@laptop is attached (since 10:00:00 UTC); one interactive client at a time\r\n"))
	before, attached = w.result()
	require.False(t, attached)
	require.Contains(t, before, "alice@laptop")
	require.Empty(t, out.String(), "the reason goes into the error, not to stdout")
}

func TestSizeQueue(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	sizes := [][2]int{{80, 24}, {120, 40}, {100, 30}}
	i := 0
	resized := make(chan os.Signal)
	stopped := make(chan struct{})
	q := newSizeQueue(ctx, func() (int, int, error) {
		s := sizes[min(i, len(sizes)-1)]
		i++
		return s[0], s[1], nil
	}, resized, func() { close(stopped) })
	require.Equal(t, &remotecommand.TerminalSize{Width: 80, Height: 24}, q.Next(), "the size at the start")
	resized <- syscall.SIGWINCH
	require.Equal(t, &remotecommand.TerminalSize{Width: 120, Height: 40}, q.Next())
	resized <- syscall.SIGWINCH
	resized <- syscall.SIGWINCH // two resizes before the stream asks: the last counts
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, &remotecommand.TerminalSize{Width: 100, Height: 30}, q.Next())
	cancel()
	<-stopped
	require.Nil(t, q.Next(), "the end of the session ends the queue")
}

func TestValidateSerial(t *testing.T) {
	o := &Options{Serial: true}
	require.NoError(t, o.Validate(), "no viewer needed, and --expiry does not matter")
	o.PrintVV = true
	require.EqualError(t, o.Validate(), "--serial: not with --browser, --print-vv or --no-launch, which are about the display")
}
