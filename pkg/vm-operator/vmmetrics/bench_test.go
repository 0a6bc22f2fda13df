package vmmetrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// vms1000 are 1000 running VMs, each with the operator's and the
// runner's full status, in 20 namespaces.
func vms1000(b *testing.B) []*unstructured.Unstructured {
	web := vm(b, webVM)
	vms := make([]*unstructured.Unstructured, 1000)
	for i := range vms {
		vms[i] = web.DeepCopy()
		vms[i].SetNamespace(fmt.Sprintf("team-%d", i%20))
		vms[i].SetName(fmt.Sprintf("vm-%d", i))
	}
	return vms
}

// BenchmarkScrape1000VMs is one /metrics request with 1000 VMs, in the
// text format Prometheus asks for.
func BenchmarkScrape1000VMs(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(static(vms1000(b)...)))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	var size int
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("scrape: %d %s", rec.Code, rec.Body)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}

// BenchmarkCollect1000VMs is the collector's own share of a scrape: the
// metrics made, not yet gathered, sorted and encoded.
func BenchmarkCollect1000VMs(b *testing.B) {
	c := New(static(vms1000(b)...))
	ch := make(chan prometheus.Metric, 20000)
	b.ReportAllocs()
	for b.Loop() {
		c.Collect(ch)
		if len(ch) != 18*1000+1 {
			b.Fatalf("%d series, want %d", len(ch), 18*1000+1)
		}
		for len(ch) > 0 {
			<-ch
		}
	}
}
