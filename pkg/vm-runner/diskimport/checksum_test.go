package diskimport

import (
	"strings"
	"testing"
)

func TestParseChecksum(t *testing.T) {
	lower := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		in, want string
	}{
		{"sha256:" + lower, "sha256:" + lower},
		{"sha256:" + strings.ToUpper(lower), "sha256:" + lower},
		{"", ""},
		{lower, ""},
		{"sha256:" + lower[:63], ""},
		{"sha256:" + lower + "0", ""},
		{"sha256:" + lower[:63] + "g", ""},
		{"SHA256:" + lower, ""},
		{"sha512:" + lower, ""},
		{"sha512:" + lower + strings.ToUpper(lower), "sha512:" + lower + lower},
		{"sha512:" + lower + lower + "0", ""},
		{"sha384:" + lower + lower[:32], ""},
		{" sha256:" + lower, ""},
	} {
		c, err := ParseChecksum(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("ParseChecksum(%q): no error", tc.in)
		case tc.want == "" && err.Error() != `want sha256:<64 hex digits> or sha512:<128 hex digits>, got "`+tc.in+`"`:
			t.Errorf("ParseChecksum(%q): error %q", tc.in, err)
		case tc.want != "" && err != nil:
			t.Errorf("ParseChecksum(%q): %v", tc.in, err)
		case tc.want != "" && c.String() != tc.want:
			t.Errorf("ParseChecksum(%q): got %s, want %s", tc.in, c, tc.want)
		}
	}
}

// FuzzParseChecksum: anything either parses into a checksum that prints
// as the lower-case input, or is refused; nothing panics.
func FuzzParseChecksum(f *testing.F) {
	for _, s := range []string{
		"",
		"sha256:",
		"sha256:" + strings.Repeat("a", 64),
		"sha256:" + strings.Repeat("A", 64),
		"sha512:" + strings.Repeat("b", 128),
		"sha256:" + strings.Repeat("0", 63) + "x",
		"sha256:" + strings.Repeat("0", 65),
		"md5:d41d8cd98f00b204e9800998ecf8427e",
		"sha256:\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseChecksum(s)
		if err != nil {
			return
		}
		if got := c.String(); got != strings.ToLower(s) {
			t.Errorf("ParseChecksum(%q).String() = %q", s, got)
		}
		again, err := ParseChecksum(c.String())
		if err != nil || again != c {
			t.Errorf("ParseChecksum(%q) does not round-trip: %v", c.String(), err)
		}
	})
}
