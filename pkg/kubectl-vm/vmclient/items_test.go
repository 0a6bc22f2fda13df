package vmclient

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEachItem: a list's items, whatever comes around them; what is not
// a list is an error, not a panic or a partial list.
func TestEachItem(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"items", `{"kind":"VirtualMachineList","metadata":{"resourceVersion":"7"},"items":[{"a":1},{"b":[2,3]}]}`, []string{`{"a":1}`, `{"b":[2,3]}`}, ""},
		{"items first", `{"items":[{}],"kind":"List"}`, []string{`{}`}, ""},
		{"empty", `{"kind":"VirtualMachineList","items":[]}`, nil, ""},
		{"null", `{"kind":"VirtualMachineList","items":null}`, nil, ""},
		{"no items", `{"kind":"VirtualMachineList"}`, nil, ""},
		{"not an object", `[{"a":1}]`, nil, "not a list but ["},
		{"cut", `{"items":[{"a":1},{"b"`, []string{`{"a":1}`}, "unexpected EOF"},
		{"bad", `{"items":[{"a":}]}`, nil, "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := eachItem(strings.NewReader(tc.in), func(b []byte) { got = append(got, string(b)) })
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.err)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
