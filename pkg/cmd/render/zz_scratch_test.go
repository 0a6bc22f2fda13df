package render_test

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmop/vmop/pkg/cmd/render"
)

func peakK(f func()) (uint64, uint64) {
	runtime.GC()
	var a runtime.MemStats
	runtime.ReadMemStats(&a)
	var pk atomic.Uint64
	stop, done := make(chan bool), make(chan bool)
	go func() {
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				close(done)
				return
			default:
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > pk.Load() {
				pk.Store(m.HeapAlloc)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	f()
	close(stop)
	<-done
	var b runtime.MemStats
	runtime.ReadMemStats(&b)
	return (pk.Load() - a.HeapAlloc) >> 20, (b.TotalAlloc - a.TotalAlloc) >> 20
}

func TestScratchKRMPeak(t *testing.T) {
	base, _ := os.ReadFile("testdata/krm/render/input.yaml")
	item := string(base[bytes.Index(base, []byte("- apiVersion: v1\n")):bytes.Index(base, []byte("\nfunctionConfig:"))+1])
	n := 16<<20 - 100
	cases := map[string]string{
		"wide16":    "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: x}\n  k: [" + strings.Repeat("[a],", (n-200)/4) + "]\n",
		"typical12": "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + strings.Repeat(item, (12<<20)/len(item)),
	}
	for name, in := range cases {
		var err error
		p, tot := peakK(func() { err = render.RunFunction(strings.NewReader(in), &bytes.Buffer{}) })
		es := "<nil>"
		if err != nil {
			es = err.Error()
			if len(es) > 100 {
				es = es[:100]
			}
		}
		t.Logf("%s %d MiB: peak %d MiB total %d MiB err %s", name, len(in)>>20, p, tot, es)
	}
}
