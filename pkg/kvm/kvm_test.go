package kvm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUsable(t *testing.T) {
	for _, c := range []struct {
		name    string
		files   []string
		wantErr string
	}{
		{"no /dev/kvm", nil, "no such file"},
		{"kvm_intel", []string{"dev/kvm", "sys/module/kvm_intel/"}, ""},
		{"kvm_amd", []string{"dev/kvm", "sys/module/kvm_amd/"}, ""},
		{"kvm_pvm", []string{"dev/kvm", "sys/module/kvm/", "sys/module/kvm_pvm/"}, "kvm_pvm"},
		{"no vendor module", []string{"dev/kvm", "sys/module/kvm/"}, "not backed by"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range c.files {
				p := filepath.Join(root, f)
				if f[len(f)-1] == '/' {
					require.NoError(t, os.MkdirAll(p, 0o755))
					continue
				}
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
				require.NoError(t, os.WriteFile(p, nil, 0o644))
			}
			err := usable(root)
			if c.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.wantErr)
		})
	}
}
