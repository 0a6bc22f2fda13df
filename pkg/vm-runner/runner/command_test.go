package runner

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
)

// TestTCGCacheOnlyWithTCG: an emulated guest gets a bounded translation
// cache; under KVM the accelerator option stays as it was.
func TestTCGCacheOnlyWithTCG(t *testing.T) {
	tmpl, err := LoadTemplate("")
	require.NoError(t, err)
	c, err := runnerconfig.Parse([]byte("\"/Runner\":\n  vm:\n    name: t\n"))
	require.NoError(t, err)
	for kvm, want := range map[bool]string{true: "-accel kvm ", false: fmt.Sprintf("-accel tcg,tb-size=%d ", TCGCacheMiB)} {
		args, err := tmpl.Args(NewMachine(&c.VM, "00000000-0000-4000-8000-000000000001", kvm, Firmware{}, "/run/vmrunner/t",
			func(string) bool { return false }))
		require.NoError(t, err)
		require.Contains(t, strings.Join(args, " ")+" ", want)
	}
}
