package security

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/metrics"
	"github.com/neptune-cluster/neptune/internal/ratelimit"
)

// DefaultRefusalLogEvery is how often a refusal of one reason from one
// source is logged: the first is written at once, later ones within the
// interval are counted and the next line says how many were held back.
const DefaultRefusalLogEvery = 10 * time.Second

// RefusedMetric names the counter of refusals by reason.
const RefusedMetric = "neptune_security_refused_total"

// Refusals reports every peer a member refuses: an announcement not
// signed by the node it names, gossip under another key or cluster name,
// a TLS handshake with a certificate of another CA, a method the caller's
// role may not call, a poll without a valid HMAC or replayed. Each is
// counted in neptune_security_refused_total{reason} and logged at WARN, at
// most once per reason and source every DefaultRefusalLogEvery. Every
// layer gets it from the member's Material; the node's server and its
// client share one. It is safe for concurrent use.
type Refusals struct {
	log     *slog.Logger
	clock   clock.Clock
	every   *ratelimit.Every
	counter *prometheus.CounterVec
}

// NewRefusals logs to log and takes time from clk.
func NewRefusals(log *slog.Logger, clk clock.Clock) *Refusals {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Refusals{log: log, clock: clock.OrReal(clk), every: ratelimit.NewEvery(DefaultRefusalLogEvery),
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RefusedMetric,
			Help: "Peers refused by this member, by reason: gossip, TLS handshakes, authorisation, polls.",
		}, []string{"reason"})}
}

// Refuse reports one refusal: why (a short snake_case reason, the metric
// label), of whom (an address, a node id or a certificate identity) and
// the error that says it in words.
func (r *Refusals) Refuse(reason, source string, err error) {
	if r == nil {
		return
	}
	r.counter.WithLabelValues(reason).Inc()
	ok, held := r.every.Allow(reason+"\x00"+source, r.clock.Now())
	if !ok {
		return
	}
	args := []any{"reason", reason, "source", source, "err", err}
	if held > 0 {
		args = append(args, "suppressed", held)
	}
	r.log.Warn("security: refused a peer", args...)
}

// Count is how many refusals of reason were reported (tests, status).
func (r *Refusals) Count(reason string) float64 {
	if r == nil {
		return 0
	}
	var m dto.Metric
	if err := r.counter.WithLabelValues(reason).Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// Register adds the counter to reg. A node and its client share one
// Refusals and one registry: the client registers it.
func (r *Refusals) Register(reg prometheus.Registerer) error {
	return metrics.Register(reg, metrics.Metric{Name: RefusedMetric, Collector: r.counter})
}

// Unregister takes the counter out of reg.
func (r *Refusals) Unregister(reg prometheus.Registerer) { reg.Unregister(r.counter) }
