package client

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/metrics"
)

// clientMetrics are the calling side's metrics.
type clientMetrics struct {
	calls    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	polls    *prometheus.CounterVec
	pollTime prometheus.Histogram
	retries  prometheus.Counter
	choices  *prometheus.CounterVec
}

func newClientMetrics(reg prometheus.Registerer) (*clientMetrics, error) {
	m := &clientMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neptune_client_calls_total",
			Help: "Calls made through this client, by service, method and outcome.",
		}, []string{"service", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "neptune_client_call_seconds",
			Help:    "End-to-end call latency including polling and retries.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
		}, []string{"service", "method"}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neptune_client_polls_total",
			Help: "Load polls sent, by result (answered, late_or_unneeded, or sent off the call path: probe, subscribe for pushed loads).",
		}, []string{"result"}),
		pollTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "neptune_client_poll_seconds",
			Help:    "Time spent polling before each call.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 14),
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "neptune_client_retries_total",
			Help: "Call attempts repeated: on another replica after a transport failure, after a pause while a partition is between primaries, or by the retry policy.",
		}),
		choices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neptune_client_choices_total",
			Help: "Replicas chosen for calls (the balancer's choice, or the primary for a write), by service and replica.",
		}, []string{"service", "replica"}),
	}
	return m, metrics.Register(reg, m.all()...)
}

func (m *clientMetrics) all() []metrics.Metric {
	return []metrics.Metric{
		{Name: "neptune_client_calls_total", Collector: m.calls},
		{Name: "neptune_client_call_seconds", Collector: m.latency},
		{Name: "neptune_client_polls_total", Collector: m.polls},
		{Name: "neptune_client_poll_seconds", Collector: m.pollTime},
		{Name: "neptune_client_retries_total", Collector: m.retries},
		{Name: "neptune_client_choices_total", Collector: m.choices},
	}
}

// unregister takes the metrics out of reg again (a client that failed to
// start).
func (m *clientMetrics) unregister(reg prometheus.Registerer) {
	for _, x := range m.all() {
		reg.Unregister(x.Collector)
	}
}
