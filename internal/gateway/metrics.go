package gateway

import (
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/gage"
	neptunemetrics "github.com/neptune-cluster/neptune/internal/metrics"
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
	paced     *prometheus.CounterVec
	responses *prometheus.CounterVec
	latency   prometheus.Histogram
	share     *prometheus.GaugeVec
	demand    *prometheus.GaugeVec
	capacity  prometheus.Gauge
	// Demand gossip from the other gateways: datagrams merged, and
	// those refused by reason (gossipauth.go).
	gossipAccepted prometheus.Counter
	gossipDropped  *prometheus.CounterVec

	subs map[string]*subMetrics
}

type subMetrics struct {
	demanded, served, servedGRU prometheus.Counter
	queue                       prometheus.Gauge
	paced                       prometheus.Counter
	dropped                     map[string]prometheus.Counter
	reserved, share, demand     prometheus.Gauge
	res                         float64

	// The same counts for /api/subscribers, which reads them without
	// going through a Prometheus gather.
	nDemanded, nServed, nDropped atomic.Int64
	// nServedMicroGRU is servedGRU in millionths, for the same reader;
	// nUsedMicroGRU is the same usage per resource.
	nServedMicroGRU atomic.Int64
	nUsedMicroGRU   [gage.NumResources]atomic.Int64
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
		paced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_gateway_paced_seconds_total",
			Help: "Time each subscriber's responses were held back by pace_responses, summed over responses (over served_total: the mean delay pacing adds)."}, sub),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_gateway_responses_total",
			Help: "Responses by HTTP status code."}, []string{"code"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "neptune_gateway_request_seconds",
			Help: "Time from a request's arrival to its answer, the wait for its turn included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neptune_gateway_share",
			Help: "This gateway's fraction (0..1) of each subscriber's reservation and limit, split among the gateways by demand."}, sub),
		demand: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neptune_gateway_demand_grps",
			Help: "Demand each subscriber puts on this gateway, generic requests per second (decaying average, what it gossips)."}, sub),
		capacity: prometheus.NewGauge(prometheus.GaugeOpts{Name: "neptune_gateway_capacity_grps",
			Help: "Cluster capacity the gateway schedules to, generic requests per second: measured by the nodes, else the configured one."}),
		gossipAccepted: prometheus.NewCounter(prometheus.CounterOpts{Name: "neptune_gateway_gossip_received_total",
			Help: "Demand datagrams from other gateways that passed authentication and were merged."}),
		gossipDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_gateway_gossip_dropped_total",
			Help: "Demand datagrams refused: unauthenticated (no or a bad HMAC), stale (time outside the window), replayed, oversized, malformed."}, []string{"reason"}),
		subs: map[string]*subMetrics{},
	}
	for _, r := range gossipDropReasons {
		m.gossipDropped.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.reserved, m.limit, m.demanded, m.served, m.servedGRU, m.dropped, m.queue, m.paced, m.responses, m.latency, m.share, m.demand, m.capacity, m.gossipAccepted, m.gossipDropped} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("gateway: metrics already registered: give each gateway its own registry")
			}
			return nil, err
		}
	}
	if _, err := neptunemetrics.RegisterShared(reg, neptunemetrics.BuildInfo()); err != nil {
		return nil, err
	}
	if err := reg.Register(ratioCollector{m}); err != nil {
		return nil, err
	}
	for _, s := range cfg.All() {
		m.reserved.WithLabelValues(s.Name).Set(s.Reservation)
		m.limit.WithLabelValues(s.Name).Set(s.Limit)
		sm := &subMetrics{
			demanded: m.demanded.WithLabelValues(s.Name), served: m.served.WithLabelValues(s.Name),
			servedGRU: m.servedGRU.WithLabelValues(s.Name), queue: m.queue.WithLabelValues(s.Name), paced: m.paced.WithLabelValues(s.Name),
			dropped:  map[string]prometheus.Counter{},
			reserved: m.reserved.WithLabelValues(s.Name), share: m.share.WithLabelValues(s.Name), demand: m.demand.WithLabelValues(s.Name),
			res: s.Reservation,
		}
		sm.share.Set(1)
		for _, r := range []string{dropQueueFull, dropOverShare, dropDeadline} {
			sm.dropped[r] = m.dropped.WithLabelValues(s.Name, r)
		}
		m.subs[s.Name] = sm
	}
	return m, nil
}

// The subscriber names passed below are always the config's (the
// classifier answers nothing else).

func (m *metrics) onDemand(sub string) {
	m.subs[sub].demanded.Inc()
	m.subs[sub].nDemanded.Add(1)
}

func (m *metrics) onServed(sub string) {
	m.subs[sub].served.Inc()
	m.subs[sub].nServed.Add(1)
}

// onUsed counts what a served request used, its cost in GRU at u and, per
// resource, its use in GRU.
func (m *metrics) onUsed(sub string, u gage.Unit, used gage.Vector) {
	sm := m.subs[sub]
	g := u.Cost(used)
	sm.servedGRU.Add(g)
	sm.nServedMicroGRU.Add(int64(math.Round(g * 1e6)))
	for r, x := range u {
		if x > 0 {
			sm.nUsedMicroGRU[r].Add(int64(math.Round(used[r] / x * 1e6)))
		}
	}
}

func (m *metrics) onPaced(sub string, held time.Duration) { m.subs[sub].paced.Add(held.Seconds()) }

func (m *metrics) onDrop(sub, why string) {
	m.subs[sub].dropped[why].Inc()
	m.subs[sub].nDropped.Add(1)
}

// onTick records what the cluster view decided.
func (m *metrics) onTick(st *clusterStatus) {
	m.capacity.Set(st.CapacityGRU)
	for name, sm := range m.subs {
		sh := st.Share[name]
		sm.share.Set(sh)
		sm.reserved.Set(sm.res * sh)
		sm.demand.Set(st.DemandGRPS[name])
	}
}
func (m *metrics) onQueued(sub string, d int) { m.subs[sub].queue.Add(float64(d)) }

func (m *metrics) onResponse(code int, seconds float64) {
	m.responses.WithLabelValues(strconv.Itoa(code)).Inc()
	m.latency.Observe(seconds)
}

var (
	servedRatioDesc = prometheus.NewDesc("neptune_gateway_served_ratio",
		"Share (0..1) of each subscriber's requests since the gateway started that were sent to the cluster (served_total over demanded_total); for a window use the rate of those counters.",
		[]string{"subscriber"}, nil)
	droppedRatioDesc = prometheus.NewDesc("neptune_gateway_dropped_ratio",
		"Share (0..1) of each subscriber's requests since the gateway started that the scheduler refused (dropped_total over demanded_total).",
		[]string{"subscriber"}, nil)
)

// ratioCollector exports each subscriber's served and dropped ratios,
// from the counts /api/subscribers reads; a subscriber with no request
// yet has none.
type ratioCollector struct{ m *metrics }

func (ratioCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- servedRatioDesc
	ch <- droppedRatioDesc
}

func (c ratioCollector) Collect(ch chan<- prometheus.Metric) {
	for name, sm := range c.m.subs {
		d := float64(sm.nDemanded.Load())
		if d == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(servedRatioDesc, prometheus.GaugeValue, float64(sm.nServed.Load())/d, name)
		ch <- prometheus.MustNewConstMetric(droppedRatioDesc, prometheus.GaugeValue, float64(sm.nDropped.Load())/d, name)
	}
}
