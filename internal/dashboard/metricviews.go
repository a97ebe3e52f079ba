package dashboard

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/internal/aggregation"
)

// Num is a measured value; NaN (not measured) encodes as JSON null and
// displays as "—".
type Num float64

// MarshalJSON writes null for NaN and infinities.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', 6, 64), nil
}

// String formats the value for display.
func (n Num) String() string { return num(float64(n)) }

var nan = Num(math.NaN())

// Metric names the dashboard reads from the registry it is given. Those
// marked "if present" are not exported by every build; their absence is
// shown, not hidden.
const (
	mServerCalls   = "neptune_server_calls_total"
	mServerLatency = "neptune_server_call_seconds"
	mClientCalls   = "neptune_client_calls_total"
	mClientLatency = "neptune_client_call_seconds"
	mQueue         = "neptune_queue_length"
	mGatewayQueue  = "neptune_gateway_queue_length"
	mRetries       = "neptune_client_retries_total"
	mRSS           = "process_resident_memory_bytes"
	// if present: the balancer's choice per replica.
	mChoices = "neptune_client_choices_total"
	// aggregation calls made through this process's client, their
	// coverage, lost partitions, hedges (internal/aggregation's metrics).
	mAggCalls    = aggregation.MetricCalls
	mAggCoverage = aggregation.MetricCoverage
	mAggLost     = aggregation.MetricLost
	mAggHedges   = aggregation.MetricHedges
	// gateway served GRU, for the subscribers' deviation.
	mGatewayServedGRU = "neptune_gateway_served_gru_total"
)

// TrafficView is the Traffic view and its JSON twin.
type TrafficView struct {
	Self   string    `json:"self"`
	At     time.Time `json:"at"`
	Filter Filter    `json:"filter"`
	// WindowS is the period the rates and percentiles cover; 0 means no
	// earlier sample yet: totals since start, percentiles over all calls.
	WindowS float64         `json:"window_s"`
	Served  []MethodTraffic `json:"served"` // calls served by this process
	Called  []MethodTraffic `json:"called"` // calls made through its client
	Errors  []ErrorCount    `json:"errors"`
	Queues  []Queue         `json:"queues"`
	Choices []Choice        `json:"choices"`
	// ChoicesNote says why Choices is empty when the metric is absent.
	ChoicesNote string `json:"choices_note,omitempty"`
	Retries     Num    `json:"retries_per_s"`
}

// MethodTraffic is one service method's calls.
type MethodTraffic struct {
	Service string `json:"service"`
	Method  string `json:"method"`
	Total   Num    `json:"total"`
	Rate    Num    `json:"calls_per_s"`
	Errors  Num    `json:"errors_per_s"`
	P50Ms   Num    `json:"p50_ms"`
	P99Ms   Num    `json:"p99_ms"`
}

// ErrorCount is one kind of error of one method, served or called.
type ErrorCount struct {
	Side    string `json:"side"` // served or called
	Service string `json:"service"`
	Method  string `json:"method"`
	Code    string `json:"code"`
	Total   Num    `json:"total"`
	Rate    Num    `json:"per_s"`
}

// Queue is a queue length: a hosted service's load index, or a gateway
// subscriber's queue.
type Queue struct {
	Name   string `json:"name"`
	Length Num    `json:"length"`
}

// Choice is how often the balancer chose a replica.
type Choice struct {
	Service string `json:"service"`
	Replica string `json:"replica"`
	Total   Num    `json:"total"`
	Rate    Num    `json:"per_s"`
}

// ok is the code label of a successful call (nerr.Label(nil)).
func ok(code string) bool { return code == "" || code == "ok" || code == "OK" }

func buildTraffic(self string, now time.Time, f Filter, cur families, base *sample) TrafficView {
	v := TrafficView{Self: self, At: now, Filter: f, Served: []MethodTraffic{}, Called: []MethodTraffic{}, Errors: []ErrorCount{},
		Queues: []Queue{}, Choices: []Choice{}, Retries: nan}
	var bf families
	if base != nil {
		v.WindowS = now.Sub(base.at).Seconds()
		bf = base.fams
	}
	rate := func(d float64) Num {
		if v.WindowS <= 0 {
			return nan
		}
		return Num(d / v.WindowS)
	}
	side := func(name, callsName, latName string) []MethodTraffic {
		byMethod := map[string]*MethodTraffic{}
		baseCalls := bf.byKey(callsName, "service", "method", "code")
		for _, s := range cur.all(callsName) {
			svc, m, code := s.labels["service"], s.labels["method"], s.labels["code"]
			if !f.service(svc) {
				continue
			}
			k := svc + "\x00" + m
			mt := byMethod[k]
			if mt == nil {
				mt = &MethodTraffic{Service: svc, Method: m, Rate: rate(0), Errors: rate(0), P50Ms: nan, P99Ms: nan}
				byMethod[k] = mt
			}
			var b *series
			if bs, ok := baseCalls[s.key("service", "method", "code")]; ok {
				b = &bs
			}
			d := delta(s.value, b)
			mt.Total += Num(s.value)
			mt.Rate += rate(d)
			if !ok(code) {
				mt.Errors += rate(d)
				v.Errors = append(v.Errors, ErrorCount{Side: name, Service: svc, Method: m, Code: code, Total: Num(s.value), Rate: rate(d)})
			}
		}
		baseLat := bf.byKey(latName, "service", "method")
		for _, s := range cur.all(latName) {
			mt := byMethod[s.labels["service"]+"\x00"+s.labels["method"]]
			if mt == nil {
				continue
			}
			var bh = baseLat[s.key("service", "method")].hist
			if base == nil {
				bh = nil
			}
			mt.P50Ms = Num(quantile(0.50, s.hist, bh) * 1000)
			mt.P99Ms = Num(quantile(0.99, s.hist, bh) * 1000)
		}
		out := make([]MethodTraffic, 0, len(byMethod))
		for _, mt := range byMethod {
			out = append(out, *mt)
		}
		slices.SortFunc(out, func(a, b MethodTraffic) int {
			return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Method, b.Method))
		})
		return out
	}
	v.Served = side("served", mServerCalls, mServerLatency)
	v.Called = side("called", mClientCalls, mClientLatency)
	slices.SortFunc(v.Errors, func(a, b ErrorCount) int {
		return cmp.Or(strings.Compare(a.Side, b.Side), strings.Compare(a.Service, b.Service), strings.Compare(a.Method, b.Method), strings.Compare(a.Code, b.Code))
	})
	for _, s := range cur.all(mQueue) {
		if f.service(s.labels["service"]) {
			v.Queues = append(v.Queues, Queue{Name: s.labels["service"], Length: Num(s.value)})
		}
	}
	for _, s := range cur.all(mGatewayQueue) {
		v.Queues = append(v.Queues, Queue{Name: "subscriber " + s.labels["subscriber"], Length: Num(s.value)})
	}
	slices.SortFunc(v.Queues, func(a, b Queue) int { return strings.Compare(a.Name, b.Name) })
	if _, present := cur[mChoices]; !present {
		v.ChoicesNote = "this process does not export " + mChoices + "{service,replica}"
	}
	baseChoices := bf.byKey(mChoices, "service", "replica")
	for _, s := range cur.all(mChoices) {
		if !f.service(s.labels["service"]) || !f.node(s.labels["replica"]) {
			continue
		}
		var b *series
		if bs, ok := baseChoices[s.key("service", "replica")]; ok {
			b = &bs
		}
		v.Choices = append(v.Choices, Choice{Service: s.labels["service"], Replica: s.labels["replica"], Total: Num(s.value), Rate: rate(delta(s.value, b))})
	}
	slices.SortFunc(v.Choices, func(a, b Choice) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Replica, b.Replica))
	})
	if rs := cur.all(mRetries); len(rs) == 1 {
		var b *series
		if brs := bf.all(mRetries); len(brs) == 1 {
			b = &brs[0]
		}
		v.Retries = rate(delta(rs[0].value, b))
	}
	return v
}

// ClassesView is the Classes view (dissertation ch. 4) and its JSON twin.
type ClassesView struct {
	Self    string     `json:"self"`
	At      time.Time  `json:"at"`
	Filter  Filter     `json:"filter"`
	WindowS float64    `json:"window_s"`
	Classes []ClassRow `json:"classes"`
	// Modes is each service's scheduling policy in force.
	Modes map[string]string `json:"modes"`
	Note  string            `json:"note,omitempty"`
}

// ClassRow is one class of one service on this node.
type ClassRow struct {
	Service string `json:"service"`
	Class   string `json:"class"`
	// Offered and Realized are yield per second over the window (totals
	// when WindowS is 0); Yield is realized over offered.
	Offered  Num `json:"offered_yield_per_s"`
	Realized Num `json:"realized_yield_per_s"`
	Yield    Num `json:"yield"`
	// Guarantee is the guaranteed resource share; Share the share the
	// class got in the last guarantee window; Below flags Share under the
	// guarantee while the class has work queued.
	Guarantee Num  `json:"guarantee"`
	Share     Num  `json:"window_share"`
	Below     bool `json:"below_guarantee"`
	Drops     Num  `json:"drops_total"`
	DropRate  Num  `json:"drops_per_s"`
	Queued    Num  `json:"queued"`
	InFlight  Num  `json:"in_flight"`
}

func buildClasses(self string, now time.Time, f Filter, cur families, base *sample) ClassesView {
	v := ClassesView{Self: self, At: now, Filter: f, Classes: []ClassRow{}, Modes: map[string]string{}}
	var bf families
	if base != nil {
		v.WindowS = now.Sub(base.at).Seconds()
		bf = base.fams
	}
	get := func(name string) map[string]series { return cur.byKey(name, "service", "class") }
	perS := func(name, k string) Num {
		s, ok := cur.byKey(name, "service", "class")[k]
		if !ok {
			return nan
		}
		if v.WindowS <= 0 {
			return Num(s.value)
		}
		var b *series
		if bs, ok := bf.byKey(name, "service", "class")[k]; ok {
			b = &bs
		}
		return Num(delta(s.value, b) / v.WindowS)
	}
	val := func(m map[string]series, k string) Num {
		if s, ok := m[k]; ok {
			return Num(s.value)
		}
		return nan
	}
	guarantee, share, drops, queued, inFlight := get("neptune_class_guarantee"), get("neptune_class_window_share"),
		get("neptune_class_drops_total"), get("neptune_class_queued"), get("neptune_class_in_flight")
	for _, s := range cur.all("neptune_class_arrivals_total") {
		if !f.service(s.labels["service"]) {
			continue
		}
		k := s.key("service", "class")
		r := ClassRow{Service: s.labels["service"], Class: s.labels["class"],
			Offered: perS("neptune_class_offered_yield_total", k), Realized: perS("neptune_class_realized_yield_total", k),
			Guarantee: val(guarantee, k), Share: val(share, k), Drops: val(drops, k), DropRate: perS("neptune_class_drops_total", k),
			Queued: val(queued, k), InFlight: val(inFlight, k), Yield: nan}
		if r.Offered > 0 {
			r.Yield = r.Realized / r.Offered
		}
		r.Below = r.Guarantee > 0 && r.Share < r.Guarantee && r.Queued > 0
		v.Classes = append(v.Classes, r)
	}
	slices.SortFunc(v.Classes, func(a, b ClassRow) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Class, b.Class))
	})
	for _, s := range cur.all("neptune_sched_mode") {
		if s.value == 1 && f.service(s.labels["service"]) {
			v.Modes[s.labels["service"]] = s.labels["policy"]
		}
	}
	if len(v.Classes) == 0 {
		v.Note = "no service with classes on this process (neptune_class_* absent)"
	}
	return v
}

// AggregationView is the Aggregation view (Data Aggregation Call) and its
// JSON twin: the calls made through this process's client (Called) and
// those whose reduction tree this node ran at the root (Rooted), which is
// where a node sees the calls of client programs.
type AggregationView struct {
	Self    string           `json:"self"`
	At      time.Time        `json:"at"`
	Filter  Filter           `json:"filter"`
	WindowS float64          `json:"window_s"`
	Called  []AggregationRow `json:"called"`
	Rooted  []AggregationRow `json:"rooted"`
	Note    string           `json:"note,omitempty"`
}

// AggregationRow is one service's aggregation calls.
type AggregationRow struct {
	Service  string `json:"service"`
	Calls    Num    `json:"calls_total"`
	CallRate Num    `json:"calls_per_s"`
	// Partial, Failed and Errors count the calls by status: the quality
	// guarantee met with partitions missing, not met, and no tree ran
	// (the caller's side only: the root does not know the guarantee).
	Partial   Num `json:"partial_total"`
	Failed    Num `json:"failed_total"`
	Errors    Num `json:"errors_total"`
	Coverage  Num `json:"mean_coverage"` // over the window, else since start
	Lost      Num `json:"partitions_lost_total"`
	LostRate  Num `json:"partitions_lost_per_s"`
	Hedges    Num `json:"hedges_total"`
	HedgeRate Num `json:"hedges_per_s"`
}

// aggMetrics names one side's aggregation metrics.
type aggMetrics struct{ calls, coverage, lost, hedges string }

var (
	aggCalled = aggMetrics{mAggCalls, mAggCoverage, mAggLost, mAggHedges}
	aggRooted = aggMetrics{aggregation.MetricRootCalls, aggregation.MetricRootCoverage, aggregation.MetricRootLost, aggregation.MetricRootHedges}
)

func buildAggregation(self string, now time.Time, f Filter, cur families, base *sample) AggregationView {
	v := AggregationView{Self: self, At: now, Filter: f}
	var bf families
	if base != nil {
		v.WindowS = now.Sub(base.at).Seconds()
		bf = base.fams
	}
	v.Called = aggRows(f, cur, bf, v.WindowS, aggCalled)
	v.Rooted = aggRows(f, cur, bf, v.WindowS, aggRooted)
	if len(v.Called) == 0 && len(v.Rooted) == 0 {
		v.Note = "no aggregation call made through this process or rooted at it yet (" + mAggCalls + ", " + aggregation.MetricRootCalls + ")"
	}
	return v
}

// aggRows is one side's rows, per service, with rates over windowS.
func aggRows(f Filter, cur, bf families, windowS float64, names aggMetrics) []AggregationRow {
	svcs := map[string]*AggregationRow{}
	row := func(svc string) *AggregationRow {
		r := svcs[svc]
		if r == nil {
			r = &AggregationRow{Service: svc, Calls: nan, CallRate: nan, Partial: nan, Failed: nan, Errors: nan, Coverage: nan,
				Lost: nan, LostRate: nan, Hedges: nan, HedgeRate: nan}
			svcs[svc] = r
		}
		return r
	}
	add := func(n *Num, x float64) {
		if *n != *n {
			*n = 0
		}
		*n += Num(x)
	}
	// counter sums a counter's series per service (over its other labels,
	// such as the calls' status) into total and, over the window, rate.
	counter := func(name string, total, rate func(*AggregationRow) *Num) {
		bs := bf.byKey(name, "service", "status")
		for _, s := range cur.all(name) {
			svc := s.labels["service"]
			if !f.service(svc) {
				continue
			}
			r := row(svc)
			add(total(r), s.value)
			if windowS > 0 {
				var b *series
				if x, ok := bs[s.key("service", "status")]; ok {
					b = &x
				}
				add(rate(r), delta(s.value, b)/windowS)
			}
		}
	}
	counter(names.calls, func(r *AggregationRow) *Num { return &r.Calls }, func(r *AggregationRow) *Num { return &r.CallRate })
	counter(names.lost, func(r *AggregationRow) *Num { return &r.Lost }, func(r *AggregationRow) *Num { return &r.LostRate })
	counter(names.hedges, func(r *AggregationRow) *Num { return &r.Hedges }, func(r *AggregationRow) *Num { return &r.HedgeRate })
	for _, s := range cur.all(names.calls) {
		st, ok := s.labels["status"]
		if !ok || !f.service(s.labels["service"]) {
			continue
		}
		r := row(s.labels["service"])
		for _, n := range []*Num{&r.Partial, &r.Failed, &r.Errors} {
			add(n, 0) // calls counted by status: none of a status is 0
		}
		switch st {
		case "partial":
			add(&r.Partial, s.value)
		case "failed":
			add(&r.Failed, s.value)
		case "error":
			add(&r.Errors, s.value)
		}
	}
	// Mean coverage from the histogram's sum and count: over the window
	// if calls were made in it, else since start.
	bcov := bf.byKey(names.coverage, "service")
	for _, s := range cur.all(names.coverage) {
		if s.hist == nil || !f.service(s.labels["service"]) {
			continue
		}
		sum, count := s.hist.GetSampleSum(), float64(s.hist.GetSampleCount())
		if b, ok := bcov[s.labels["service"]]; ok && b.hist != nil && float64(b.hist.GetSampleCount()) < count {
			sum -= b.hist.GetSampleSum()
			count -= float64(b.hist.GetSampleCount())
		}
		if count > 0 {
			row(s.labels["service"]).Coverage = Num(sum / count)
		}
	}
	out := make([]AggregationRow, 0, len(svcs))
	for _, r := range svcs {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b AggregationRow) int { return strings.Compare(a.Service, b.Service) })
	return out
}

// SubscribersView is the gateway's Subscribers view and its JSON twin.
type SubscribersView struct {
	Self        string          `json:"self"`
	At          time.Time       `json:"at"`
	Gateways    []string        `json:"gateways"`
	CapacityGRU Num             `json:"capacity_grps"`
	WindowS     float64         `json:"window_s"`
	Subscribers []SubscriberRow `json:"subscribers"`
	Note        string          `json:"note,omitempty"`
}

// SubscriberRow is one subscriber: what it reserved, what it asks for,
// what it got and the deviation between what it got and what it was
// entitled to.
type SubscriberRow struct {
	Subscriber
	// ServedGRPS is the GRU served per second here over the window.
	ServedGRPS Num `json:"served_grps"`
	// Entitled is min(demand, reservation × this gateway's share).
	Entitled Num `json:"entitled_grps"`
	// Deviation is (served − entitled) / entitled; negative means the
	// subscriber got less than its reservation promised.
	Deviation Num `json:"deviation"`
	// Short flags a deviation below −10%.
	Short bool `json:"short"`
}

func buildSubscribers(self string, now time.Time, subs Subscribers, cur families, base *sample) SubscribersView {
	v := SubscribersView{Self: self, At: now, Gateways: subs.Gateways, CapacityGRU: Num(subs.CapacityGRU), Subscribers: []SubscriberRow{}}
	if v.Gateways == nil {
		v.Gateways = []string{}
	}
	var bf families
	if base != nil {
		v.WindowS = now.Sub(base.at).Seconds()
		bf = base.fams
	}
	served := cur.byKey(mGatewayServedGRU, "subscriber")
	bserved := bf.byKey(mGatewayServedGRU, "subscriber")
	for _, s := range subs.Subscribers {
		r := SubscriberRow{Subscriber: s, ServedGRPS: nan, Entitled: Num(min(s.DemandGRPS, s.Reserved*s.Share)), Deviation: nan}
		if cs, ok := served[s.Name]; ok && v.WindowS > 0 {
			var b *series
			if bs, ok := bserved[s.Name]; ok {
				b = &bs
			}
			r.ServedGRPS = Num(delta(cs.value, b) / v.WindowS)
			if r.Entitled > 0 {
				r.Deviation = (r.ServedGRPS - r.Entitled) / r.Entitled
				r.Short = r.Deviation < -0.1
			}
		}
		v.Subscribers = append(v.Subscribers, r)
	}
	return v
}
