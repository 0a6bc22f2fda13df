package render

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vmop/vmop/pkg/manifest"
)

// vmStream returns n copies of the local-path example, each VM named apart,
// as one multi-document stream.
func vmStream(tb testing.TB, n int) []byte {
	tb.Helper()
	doc, err := os.ReadFile("../../examples/local-path-test-vm.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	for i := range n {
		buf.WriteString("---\n")
		buf.WriteString(strings.Replace(string(doc), "name: test-vm", fmt.Sprintf("name: vm-%d", i), 1))
	}
	return buf.Bytes()
}

// BenchmarkRender renders 1,000 and 10,000 VMs from one multi-document
// stream to YAML, the path of kubectl vm render, in process. Reading the
// VMs (yaml.v2, then JSON into the types) takes the largest share, then
// writing the objects (encoding/json and manifest's emitter). The bar is
// BenchmarkRenderVsHelm's (pkg/kubectl-vm/cmd/render): at least 3 times
// less CPU than helm template.
func BenchmarkRender(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		in := vmStream(b, n)
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				w, err := manifest.NewWriter(io.Discard, manifest.FormatYAML)
				if err != nil {
					b.Fatal(err)
				}
				problems, err := Stream(bytes.NewReader(in), "bench", w, StreamOptions{})
				if err != nil || len(problems) > 0 {
					b.Fatal(err, problems)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
			perVM := b.Elapsed().Seconds() / float64(b.N*n)
			b.ReportMetric(1/perVM, "VMs/s")
			b.ReportMetric(perVM*1e6, "µs/VM")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// vmGenerator produces n VM documents on the fly, so that a test of
// Stream's memory holds no input itself.
type vmGenerator struct {
	doc     string
	n, next int
	pending []byte
	reads   int
	peak    uint64 // the live heap, sampled every 500 reads
}

func (g *vmGenerator) Read(b []byte) (int, error) {
	if g.reads++; g.reads%500 == 0 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		g.peak = max(g.peak, ms.HeapAlloc)
	}
	if len(g.pending) == 0 {
		if g.next == g.n {
			return 0, io.EOF
		}
		g.pending = []byte("---\n" + strings.Replace(g.doc, "name: test-vm", fmt.Sprintf("name: vm-%d", g.next), 1))
		g.next++
	}
	n := copy(b, g.pending)
	g.pending = g.pending[n:]
	return n, nil
}

// TestStreamMemoryFlat checks that Stream holds no document longer than it
// needs: the live heap while rendering 20,000 VMs stays that of 2,000.
func TestStreamMemoryFlat(t *testing.T) {
	doc, err := os.ReadFile("../../examples/local-path-test-vm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	peak := func(n int) uint64 {
		g := &vmGenerator{doc: string(doc), n: n}
		w, _ := manifest.NewWriter(io.Discard, manifest.FormatYAML)
		problems, err := Stream(g, "mem", w, StreamOptions{})
		if err != nil || len(problems) > 0 || g.next != n {
			t.Fatal(err, problems, g.next)
		}
		return g.peak
	}
	small, large := peak(2000), peak(20000)
	t.Logf("peak live heap: %d KiB for 2,000 VMs, %d KiB for 20,000", small>>10, large>>10)
	if large > small+1<<20 {
		t.Errorf("live heap grows with the number of VMs: %d KiB for 2,000, %d KiB for 20,000", small>>10, large>>10)
	}
}
