package gateway

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/gage"
)

// metrics are the gateway's Prometheus metrics. The per-subscriber ones
// are what an operator checks a guarantee with: rate(served_gru_total)
// against reserved_grps, and dropped_total for who was refused and why.
// Children are made once per subscriber at start, so the request path
// only increments.
type metrics struct {
	reserved  *prometheus.GaugeVec
	limit     *prometheus.GaugeVec
	demanded  *prometheus.CounterVec
	served    *prometheus.CounterVec
	servedGRU *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	queue     *prometheus.GaugeVec
	responses *prometheus.CounterVec
	latency   prometheus.Histogram

	subs map[string]*subMetrics
}

type subMetrics struct {
	demanded, served, servedGRU prometheus.Counter
	queue                       prometheus.Gauge
	dropped                     map[string]prometheus.Counter
}

// Reasons a request is dropped, the reason label of dropped_total.
const (
	dropQueueFull = "queue_full" // its subscriber's queue was full: 429
	dropOverShare = "wait"       // no turn within the wait bound: 429
	dropDeadline  = "deadline"   // its deadline passed while it waited: 504
)

func newMetrics(reg prometheus.Registerer, cfg gage.Config) (*metrics, error) {
	sub := []string{"subscriber"}
	m := &metrics{
		reserved: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neptune_gateway_reserved_grps",
			Help: "Reservation of each subscriber, generic requests per second (this gateway's share of it)."}, sub),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neptune_gateway_limit_grps",
			Help: "Limit of each subscriber, generic requests per second; 0 means none."}, sub),
		demanded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_gateway_demanded_total",
			Help: "Requests classified to each subscriber (routed and authorised)."}, sub),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_gateway_served_total",
			Help: "Requests of each subscriber whose turn came and that were sent to the cluster."}, sub),
		servedGRU: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_gateway_served_gru_total",
			Help: "Measured usage of each subscriber's requests, in generic requests (compare its rate with reserved_grps)."}, sub),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_gateway_dropped_total",
			Help: "Requests of each subscriber refused by the scheduler: queue_full and wait (429), deadline (504)."}, []string{"subscriber", "reason"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neptune_gateway_queue_length",
			Help: "Requests of each subscriber waiting for their turn."}, sub),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_gateway_responses_total",
			Help: "Responses by HTTP status code."}, []string{"code"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "neptune_gateway_request_seconds",
			Help: "Time from a request's arrival to its answer, the wait for its turn included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		subs: map[string]*subMetrics{},
	}
	for _, c := range []prometheus.Collector{m.reserved, m.limit, m.demanded, m.served, m.servedGRU, m.dropped, m.queue, m.responses, m.latency} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("gateway: metrics already registered: give each gateway its own registry")
			}
			return nil, err
		}
	}
	for _, s := range cfg.All() {
		m.reserved.WithLabelValues(s.Name).Set(s.Reservation)
		m.limit.WithLabelValues(s.Name).Set(s.Limit)
		sm := &subMetrics{
			demanded: m.demanded.WithLabelValues(s.Name), served: m.served.WithLabelValues(s.Name),
			servedGRU: m.servedGRU.WithLabelValues(s.Name), queue: m.queue.WithLabelValues(s.Name),
			dropped: map[string]prometheus.Counter{},
		}
		for _, r := range []string{dropQueueFull, dropOverShare, dropDeadline} {
			sm.dropped[r] = m.dropped.WithLabelValues(s.Name, r)
		}
		m.subs[s.Name] = sm
	}
	return m, nil
}

// The subscriber names passed below are always the config's (the
// classifier answers nothing else).

func (m *metrics) onDemand(sub string)          { m.subs[sub].demanded.Inc() }
func (m *metrics) onServed(sub string)          { m.subs[sub].served.Inc() }
func (m *metrics) onUsed(sub string, g float64) { m.subs[sub].servedGRU.Add(g) }
func (m *metrics) onDrop(sub, why string)       { m.subs[sub].dropped[why].Inc() }
func (m *metrics) onQueued(sub string, d int)   { m.subs[sub].queue.Add(float64(d)) }

func (m *metrics) onResponse(code int, seconds float64) {
	m.responses.WithLabelValues(strconv.Itoa(code)).Inc()
	m.latency.Observe(seconds)
}
