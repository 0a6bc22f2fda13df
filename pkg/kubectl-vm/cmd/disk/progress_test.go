package disk

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPlainProgress: without a terminal, a line at each tenth of the
// bytes sent and of the conversion, and the receiver's other lines as
// they are.
func TestPlainProgress(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out, "root.qcow2", 100<<20)
	require.False(t, p.tty)
	n, err := io.Copy(io.Discard, io.LimitReader(p.reader(strings.NewReader(strings.Repeat("x", 100<<20))), 100<<20))
	require.NoError(t, err)
	require.Equal(t, int64(100<<20), n)
	lines := p.lines()
	for _, done := range []int64{0, 5, 15, 15, 99, 100} {
		fmt.Fprintf(lines, "progress converting %d 100\n", done)
	}
	// Split across writes, as a stream may be.
	fmt.Fprint(lines, "a line of the rec")
	fmt.Fprint(lines, "eiver\n")
	p.end()

	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	sent := got[:len(got)-5]
	require.Len(t, sent, 11, "0%% to 100%%: %q", out.String())
	for i, l := range sent {
		require.True(t, strings.HasPrefix(l, fmt.Sprintf("root.qcow2: sent %d%% (", i*10)), l)
	}
	require.True(t, strings.HasPrefix(sent[10], "root.qcow2: sent 100% (100.0 MiB of 100.0 MiB, "), sent[10])
	require.Equal(t, []string{"converting: 0%", "converting: 10%", "converting: 90%", "converting: 100%", "a line of the receiver"}, got[len(got)-5:])
}

func TestBar(t *testing.T) {
	require.Equal(t, "[############------------]", cells(50, 100))
	require.Equal(t, "[------------------------]", cells(0, 0))
	require.Equal(t, "[########################]", cells(200, 100))
	p := &progress{name: "root.qcow2", total: 4 << 20, start: time.Now().Add(-time.Second)}
	p.sent.Store(1 << 20)
	require.Equal(t, "root.qcow2   [######------------------]  25%  1.0 MiB of 4.0 MiB  1.0 MiB/s  3s left", p.bar())
	p.phase, p.done, p.of = "converting", 1, 4
	require.Equal(t, "converting   [######------------------]  25%", p.bar())
}
