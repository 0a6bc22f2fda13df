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

// BenchmarkScrape1000VMs is one /metrics request with 1000 running VMs,
// each with the operator's and the runner's full status, in the text
// format Prometheus asks for.
func BenchmarkScrape1000VMs(b *testing.B) {
	web := vm(b, webVM)
	vms := make([]*unstructured.Unstructured, 1000)
	for i := range vms {
		vms[i] = web.DeepCopy()
		vms[i].SetNamespace(fmt.Sprintf("team-%d", i%20))
		vms[i].SetName(fmt.Sprintf("vm-%d", i))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(static(vms...)))
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
