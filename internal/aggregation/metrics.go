package aggregation

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/metrics"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Metric names, per service, of the aggregations a Caller runs (the
// calls made through this process's client): what the dashboard's
// Aggregation view reads.
const (
	MetricCalls    = "neptune_aggregation_calls_total"
	MetricCoverage = "neptune_aggregation_coverage"
	MetricLost     = "neptune_aggregation_partitions_lost_total"
	MetricHedges   = "neptune_aggregation_hedges_total"
)

// Metric names, per service, of the aggregations whose reduction tree a
// node's Server ran at the root: what a node's dashboard can show of
// calls made elsewhere (client programs). The root knows the partitions
// the caller sent it, not those the caller already found without a live
// replica, so its coverage can be higher than the caller's.
const (
	MetricRootCalls    = "neptune_aggregation_root_calls_total"
	MetricRootCoverage = "neptune_aggregation_root_coverage"
	MetricRootLost     = "neptune_aggregation_root_partitions_lost_total"
	MetricRootHedges   = "neptune_aggregation_root_hedges_total"
)

// Metrics are a Caller's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	calls    *prometheus.CounterVec
	coverage *prometheus.HistogramVec
	lost     *prometheus.CounterVec
	hedges   *prometheus.CounterVec

	rootCalls    *prometheus.CounterVec
	rootCoverage *prometheus.HistogramVec
	rootLost     *prometheus.CounterVec
	rootHedges   *prometheus.CounterVec
}

var coverageBuckets = []float64{0.5, 0.75, 0.9, 0.95, 0.99, 1}

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
			Buckets: coverageBuckets,
		}, []string{"service"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricLost,
			Help: "Requested partitions that did not contribute to an aggregation call (no live replica, failed, or late).",
		}, []string{"service"}),
		hedges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricHedges,
			Help: "Leaf partitions re-issued to another replica anywhere in the reduction trees of this process's aggregation calls.",
		}, []string{"service"}),
		rootCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRootCalls,
			Help: "Aggregation calls whose reduction tree this node ran at the root.",
		}, []string{"service"}),
		rootCoverage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricRootCoverage,
			Help:    "Fraction of the partitions sent to the root (this node) that its answer covers.",
			Buckets: coverageBuckets,
		}, []string{"service"}),
		rootLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRootLost,
			Help: "Partitions sent to the root (this node) that its answer lacks (failed or late).",
		}, []string{"service"}),
		rootHedges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRootHedges,
			Help: "Leaf partitions re-issued to another replica in the trees this node ran at the root.",
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
		{Name: MetricRootCalls, Collector: m.rootCalls},
		{Name: MetricRootCoverage, Collector: m.rootCoverage},
		{Name: MetricRootLost, Collector: m.rootLost},
		{Name: MetricRootHedges, Collector: m.rootHedges},
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

// metrics are c's metrics; nil without a caller or metrics.
func (c *Caller) metrics() *Metrics {
	if c == nil {
		return nil
	}
	return c.cfg.Metrics
}

// observeRoot records a call this node's Server answered at the root of
// its tree (the participant without a parent, or Base's coordinator):
// what its answer covers of the partitions it was sent. Subtrees below
// the root and failed answers record nothing; the caller counts those.
func (m *Metrics) observeRoot(in *pb.AggregateRequest, out *pb.AggregateResponse, err error) {
	if m == nil || err != nil || out == nil {
		return
	}
	sent := 0
	root := in.Self < 0
	for _, p := range in.Participants {
		if p.Index >= 0 {
			sent++
		}
		if p.Index == in.Self && p.Parent < 0 {
			root = true
		}
	}
	if !root || sent == 0 {
		return
	}
	svc := in.Service
	got := min(len(out.Partitions), sent)
	m.rootCalls.WithLabelValues(svc).Inc()
	m.rootCoverage.WithLabelValues(svc).Observe(float64(got) / float64(sent))
	m.rootLost.WithLabelValues(svc).Add(float64(sent - got))
	m.rootHedges.WithLabelValues(svc).Add(float64(out.Hedges))
}
