package procmem

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRSS reads this test's own resident memory, and fails for a process
// that is not there.
func TestRSS(t *testing.T) {
	rss, err := RSS(os.Getpid())
	require.NoError(t, err)
	require.Greater(t, rss, int64(1<<20), "a Go test holds more than 1 MiB")
	_, err = RSS(1 << 30) // above pid_max
	require.Error(t, err)
}
