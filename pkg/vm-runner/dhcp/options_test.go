package dhcp

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "vm-1", "example.com", "example.com.", "_srv.example.com", strings.Repeat("a", 63)} {
		require.NoError(t, checkName(ok), ok)
	}
	for _, bad := range []string{"", ".", "a..b", ".a", strings.Repeat("a", 64), "a b", "a;b", "ä", strings.Repeat("a.", 127) + "a"} {
		require.Error(t, checkName(bad), bad)
	}
}
