package runnerexec

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUntilEscape(t *testing.T) {
	for in, want := range map[string]string{
		"ping hello\r":       "ping hello\r",
		"ping\r\x1dnot sent": "ping\r",
		"\x1d":               "",
		"":                   "",
		"a\x1db\x1dc":        "a",
	} {
		got, err := io.ReadAll(UntilEscape(strings.NewReader(in)))
		require.NoError(t, err)
		require.Equal(t, want, string(got), "%q", in)
	}
	// Reads after the escape end at once, without reading on.
	r := UntilEscape(io.MultiReader(strings.NewReader("x\x1d"), blockingReader{}))
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, "x", string(got))
}

// blockingReader fails a test that reads it.
type blockingReader struct{}

func (blockingReader) Read([]byte) (int, error) { panic("read after the escape") }

func TestCommandError(t *testing.T) {
	for out, want := range map[string]string{
		"vm-runner serial: the serial console is in use: alice@laptop is attached (since 10:00:00 UTC); one interactive client at a time\r\n": "the serial console is in use: alice@laptop is attached (since 10:00:00 UTC); one interactive client at a time",
		"unknown flag: --attach\nUsage: vm-runner [-c config.yaml] [flags]\n":                                                                 "the VM's runner has no serial console: it runs a vm-runner older than the serial console; restart the VM to run the current runner image",
		"something else\n": "something else",
	} {
		require.EqualError(t, CommandError(out), want)
	}
}

func TestParseProgress(t *testing.T) {
	line := ProgressLine("Converting", 5, 10)
	require.Equal(t, "progress converting 5 10", line)
	phase, done, total, ok := ParseProgress(line)
	require.True(t, ok)
	require.Equal(t, "converting", phase)
	require.Equal(t, int64(5), done)
	require.Equal(t, int64(10), total)
	for _, l := range []string{"", "progress", "progress converting 5", "progress converting x 10", "converting 5 10"} {
		_, _, _, ok := ParseProgress(l)
		require.False(t, ok, l)
	}
}
