package aggregation

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/metrics"
	"github.com/neptune-cluster/neptune/internal/nerr"
)

// Metric names, per service, of the aggregations a Caller runs (the
// calls made through this process's client, not the subtrees its node
// serves for others): what the dashboard's Aggregation view reads.
const (
	MetricCalls    = "neptune_aggregation_calls_total"
	MetricCoverage = "neptune_aggregation_coverage"
	MetricLost     = "neptune_aggregation_partitions_lost_total"
	MetricHedges   = "neptune_aggregation_hedges_total"
)

// Metrics are a Caller's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	calls    *prometheus.CounterVec
	coverage *prometheus.HistogramVec
	lost     *prometheus.CounterVec
	hedges   *prometheus.CounterVec
}

// NewMetrics registers the aggregation metrics into reg (all or none).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCalls,
			Help: "Aggregation calls made, by service and status: full, partial (the quality guarantee met, partitions missing), failed (below it) or error (no tree ran: bad request, unknown service, cancelled).",
		}, []string{"service", "status"}),
		coverage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricCoverage,
			Help:    "Fraction of the requested partitions that contributed to each aggregation call that ran.",
			Buckets: []float64{0.5, 0.75, 0.9, 0.95, 0.99, 1},
		}, []string{"service"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricLost,
			Help: "Requested partitions that did not contribute to an aggregation call (no live replica, failed, or late).",
		}, []string{"service"}),
		hedges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricHedges,
			Help: "Leaf partitions re-issued to another replica anywhere in the reduction trees of this process's aggregation calls.",
		}, []string{"service"}),
	}
	if err := metrics.Register(reg, m.all()...); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) all() []metrics.Metric {
	return []metrics.Metric{
		{Name: MetricCalls, Collector: m.calls},
		{Name: MetricCoverage, Collector: m.coverage},
		{Name: MetricLost, Collector: m.lost},
		{Name: MetricHedges, Collector: m.hedges},
	}
}

// Unregister takes the metrics out of reg again (a client that closed).
func (m *Metrics) Unregister(reg prometheus.Registerer) {
	if m == nil {
		return
	}
	for _, x := range m.all() {
		reg.Unregister(x.Collector)
	}
}

// observe records one call of a: its result, or, when there is none, its
// error. A call none of whose partitions had a live replica returns no
// result (ErrNoReplica) but lost every partition: it counts as failed
// with coverage 0.
func (m *Metrics) observe(a Aggregation, res *Result, err error) {
	if m == nil {
		return
	}
	svc := a.Service
	switch {
	case res != nil:
		m.calls.WithLabelValues(svc, res.Status.String()).Inc()
		m.coverage.WithLabelValues(svc).Observe(res.Coverage)
		m.lost.WithLabelValues(svc).Add(float64(max(len(a.Partitions)-len(res.Contributing), 0)))
		m.hedges.WithLabelValues(svc).Add(float64(res.Hedges))
	case errors.Is(err, nerr.ErrNoReplica):
		m.calls.WithLabelValues(svc, Failed.String()).Inc()
		m.coverage.WithLabelValues(svc).Observe(0)
		m.lost.WithLabelValues(svc).Add(float64(len(a.Partitions)))
		m.hedges.WithLabelValues(svc).Add(0)
	default:
		m.calls.WithLabelValues(svc, "error").Inc()
	}
}
