package logs

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestUntilDone(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	r := untilDone(ctx)
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(r)
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("the follower's stdin ended before the command (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	require.NoError(t, <-read, "stdin ends with the command: the follower in the pod ends too")
}

func TestLimitedBuffer(t *testing.T) {
	var b limitedBuffer
	n, err := b.Write([]byte(strings.Repeat("x", maxStderr+10)))
	require.NoError(t, err)
	require.Equal(t, maxStderr+10, n, "never an error: vm-runner must not block on its stderr")
	_, _ = b.Write([]byte("more"))
	require.Len(t, b.String(), maxStderr)
}
