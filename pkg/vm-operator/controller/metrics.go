package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the operator's Prometheus metrics.
type Metrics struct {
	writes     *prometheus.CounterVec
	reconciles *prometheus.CounterVec
	duration   prometheus.Histogram
	synced     prometheus.Gauge
}

// NewMetrics makes the metrics and registers them with reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vmop_writes_total",
			Help: "Writes to the API server (applies, creates, deletes, status), by kind.",
		}, []string{"kind"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vmop_reconciles_total",
			Help: "Reconciles of VirtualMachines, by result (ok, error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "vmop_reconcile_duration_seconds",
			Help:    "Time to reconcile one VirtualMachine.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		synced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vmop_informers_synced",
			Help: "1 once the informer caches are filled.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.writes, m.reconciles, m.duration, m.synced)
	}
	return m
}

func (m *Metrics) write(kind string) { m.writes.WithLabelValues(kind).Inc() }

func (m *Metrics) observeReconcile(d time.Duration, err error) {
	m.duration.Observe(d.Seconds())
	if err != nil {
		m.reconciles.WithLabelValues("error").Inc()
	} else {
		m.reconciles.WithLabelValues("ok").Inc()
	}
}
