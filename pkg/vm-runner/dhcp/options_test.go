package dhcp

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodeSearch(t *testing.T) {
	for name, tc := range map[string]struct {
		names []string
		want  []byte
	}{
		"one name":     {[]string{"example.com"}, []byte("\x07example\x03com\x00")},
		"trailing dot": {[]string{"example.com."}, []byte("\x07example\x03com\x00")},
		// RFC 3397 section 3's example.
		"suffix as pointer": {
			[]string{"eng.apple.com", "marketing.apple.com"},
			[]byte("\x03eng\x05apple\x03com\x00\x09marketing\xc0\x04"),
		},
		"repeated name": {[]string{"a.b", "a.b"}, []byte("\x01a\x01b\x00\xc0\x00")},
		"nothing shared": {
			[]string{"a.b", "c.d"},
			[]byte("\x01a\x01b\x00\x01c\x01d\x00"),
		},
		"kubernetes": {
			[]string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"},
			[]byte("\x07default\x03svc\x07cluster\x05local\x00\xc0\x08\xc0\x0c"),
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := encodeSearch(tc.names)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestEncodeSearchBeyondPointers(t *testing.T) {
	// 300 names of a 63-byte label each in "local" run past 0x4000 bytes,
	// where pointers no longer reach: a name first written there is
	// written out again, while "local", first written at 64, is pointed
	// to to the end.
	var names []string
	for i := range 300 {
		names = append(names, strings.Repeat(string(rune('a'+i%26)), 61)+string(rune('a'+i/26))+"x.local")
	}
	last := names[len(names)-1]
	b, err := encodeSearch(append(names, last))
	require.NoError(t, err)
	require.Greater(t, len(b), 0x4000+2*66)
	encoded := append([]byte{63}, strings.Split(last, ".")[0]...)
	encoded = append(encoded, 0xc0, 64)
	require.Equal(t, encoded, b[len(b)-66:])
	require.Equal(t, encoded, b[len(b)-2*66:len(b)-66])
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "vm-1", "example.com", "example.com.", "_srv.example.com", strings.Repeat("a", 63)} {
		require.NoError(t, checkName(ok), ok)
	}
	for _, bad := range []string{"", ".", "a..b", ".a", strings.Repeat("a", 64), "a b", "a;b", "ä", strings.Repeat("a.", 127) + "a"} {
		require.Error(t, checkName(bad), bad)
	}
}
