package render

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// BenchmarkRenderCommand is kubectl vm render -f FILE on one file of
// 10,000 VirtualMachines, output to YAML: the whole command, temporary
// file included. BenchmarkRenderVsHelm compares it with helm template.
func BenchmarkRenderCommand(b *testing.B) {
	const vms = 10000
	doc, err := os.ReadFile("../../../../examples/local-path-test-vm.yaml")
	require.NoError(b, err)
	var in strings.Builder
	for i := range vms {
		in.WriteString("---\n")
		in.WriteString(strings.Replace(string(doc), "name: test-vm", fmt.Sprintf("name: vm-%d", i), 1))
	}
	file := filepath.Join(b.TempDir(), "vms.yaml")
	require.NoError(b, os.WriteFile(file, []byte(in.String()), 0o644))
	for b.Loop() {
		o := &Options{Filenames: []string{file}, Output: "yaml",
			IOStreams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}}
		require.NoError(b, o.Run())
	}
	perVM := b.Elapsed().Seconds() / float64(b.N*vms)
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/10k-VMs")
	b.ReportMetric(1/perVM, "VMs/s")
	b.ReportMetric(0, "ns/op")
}
