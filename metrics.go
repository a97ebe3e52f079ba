package neptune

import (
	"github.com/prometheus/client_golang/prometheus"
)

// serverMetrics are a node's serving-side metrics.
type serverMetrics struct {
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	wait    *prometheus.HistogramVec
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	m := &serverMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neptune_server_calls_total",
			Help: "Calls served by this node, by service, method and outcome.",
		}, []string{"service", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "neptune_server_call_seconds",
			Help:    "Time from arrival to answer of calls served by this node.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
		}, []string{"service", "method"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "neptune_server_queue_wait_seconds",
			Help:    "Time requests spent queued before a worker took them.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 20),
		}, []string{"service", "class"}),
	}
	reg.MustRegister(m.calls, m.latency, m.wait)
	return m
}

// clientMetrics are the calling side's metrics.
type clientMetrics struct {
	calls    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	polls    *prometheus.CounterVec
	pollTime prometheus.Histogram
	retries  prometheus.Counter
}

func newClientMetrics(reg prometheus.Registerer) *clientMetrics {
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
			Help: "Load polls sent, by result (answered or late).",
		}, []string{"result"}),
		pollTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "neptune_client_poll_seconds",
			Help:    "Time spent polling before each call.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 14),
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "neptune_client_retries_total",
			Help: "Call attempts repeated on another replica after a transport failure.",
		}),
	}
	reg.MustRegister(m.calls, m.latency, m.polls, m.pollTime, m.retries)
	return m
}
