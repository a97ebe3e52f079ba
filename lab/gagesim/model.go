package gagesim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/lab/sim"
)

// subSpec is one subscriber of a run and the traffic it sends.
type subSpec struct {
	name   string
	res    float64 // reservation, GRPS
	limit  float64 // GRPS, 0: none
	demand float64 // offered load, GRPS (mean)
	// constant arrivals instead of Poisson (the paper's clients send at a
	// constant rate, §4.1).
	constant bool
	sizes    sizes
	// split is the weight of each gateway in the subscriber's traffic;
	// nil sends everything to gateway 0.
	split []float64
}

// scenario is one simulated run.
type scenario struct {
	kind        string // "gage" (credit), "mclock" (tag) or "fifo"
	subs        []subSpec
	gateways    int
	backends    int
	backendGRPS float64 // each backend's CPU and disk, in GRU per second
	backendNet  float64 // each backend's network, bytes per second
	// capacity > 0 gives the schedulers this cluster capacity (GRPS)
	// instead of the estimate from node reports.
	capacity         float64
	cycle, acct      time.Duration
	gossip, ttl      time.Duration
	warmup, duration time.Duration
	// killAt > 0: the last gateway dies at this time (from the start);
	// its clients go to the others.
	killAt   time.Duration
	netDelay time.Duration
	// perResponse reports each request's usage to its gateway as it
	// completes, as the HTTP gateway does (the node's measure rides on
	// the call's answer); otherwise usage goes with the node's report
	// every accounting cycle, the paper's feedback (§3.5). The capacity
	// comes from the accounting cycle either way.
	perResponse bool
	// exactCost reports each request's actual usage to its gateway the
	// moment it is dispatched, as if its cost were known beforehand: a
	// reference no gateway can reach, which bounds what better cost
	// prediction could gain.
	exactCost bool
	// pace sends each response's bytes out of the gateway through its
	// gage.Shaper, in chunks, as the gateway's pace_responses does; the
	// network usage is then counted as the chunks leave the gateway (the
	// outgoing link, §3.1) instead of on the node's link.
	pace       bool
	bin        time.Duration // width of the served-usage bins
	perGateway bool          // keep bins per gateway too
	seed       uint64
}

// result is what a run measured over [warmup, warmup+duration].
type result struct {
	sc   scenario
	subs []subResult
	// bins[s][i] is subscriber s's usage completed in bin i; gwBins[g][s]
	// the same for what gateway g dispatched (if perGateway).
	bins   [][]gage.Vector
	gwBins [][][]gage.Vector
	// shareBack is when, after the kill, gateway 0 first counted itself
	// the only live gateway (and so took every reservation whole).
	shareBack time.Duration
	// paced[s] is, with pace, how long each measured response of
	// subscriber s waited in the shaper: from reaching the gateway to its
	// last chunk leaving.
	paced [][]time.Duration
}

type subResult struct {
	spec                        subSpec
	arrived, served, dropped    gage.Vector
	nArrived, nServed, nDropped int
	// completed is the usage of the requests that arrived in the measured
	// span and completed, however late (the run drains after the span):
	// "what they asked" against "what they got", without the requests in
	// flight at either end of the span.
	completed gage.Vector
}

// drain is how long a run goes on after the measured span without
// arrivals, for the requests that arrived in it to complete.
const drain = 3 * time.Second

func (r *result) grps(v gage.Vector) float64 {
	return gage.DefaultUnit.Cost(v) / r.sc.duration.Seconds()
}

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// kinds builds each contender's scheduler.
var kinds = map[string]func(gage.Config, gage.Options) (gage.Scheduler, error){
	"gage":   func(c gage.Config, o gage.Options) (gage.Scheduler, error) { return gage.NewCredit(c, o) },
	"mclock": func(c gage.Config, o gage.Options) (gage.Scheduler, error) { return gage.NewTag(c, o) },
	"fifo":   func(c gage.Config, o gage.Options) (gage.Scheduler, error) { return gage.NewFIFO(c, o) },
}

type req struct {
	id      uint64
	sub     int
	use     gage.Vector
	arrived time.Duration
	gw      int
}

type acc struct {
	n    int
	used gage.Vector
}

// backend is one node: a stage per resource (CPU, disk, network), each a
// FIFO server running at the backend's capacity in that resource (see
// backendRates), which a request passes through in turn.
// Stages overlap across requests, as a CPU computes for one request while
// the disk reads for another, so a backend's throughput is set by its
// bottleneck resource over the mix, which is what GRU accounting assumes
// (§3.5, one balance per resource).
type backend struct {
	id       int
	n        int // requests in the backend
	stages   [gage.NumResources]stage
	lastTick time.Duration
	total    gage.Vector
	usage    [][]acc // [gateway][subscriber]: usage since the last report
}

type stage struct {
	q       []*req
	busy    bool
	started time.Duration
	busyAcc time.Duration // busy time since the last report
}

type gateway struct {
	id      int
	name    string
	dead    bool
	sched   gage.Scheduler
	est     *gage.CapacityEstimator
	split   *gage.Splitter
	meters  []gage.Meter
	avgCost []float64 // per subscriber, GRU per request from usage reports
	shaper  *gage.Shaper
	queued  map[uint64]*req
	wakeAt  time.Duration // pending wake event, -1 if none
}

type world struct {
	sc       scenario
	eng      *sim.Engine[func()]
	cfg      gage.Config
	names    []string
	gws      []*gateway
	bes      []*backend
	res      *result
	nextID   uint64
	beRR     int
	from, to time.Duration
}

// simulate runs sc.
func simulate(ctx context.Context, sc scenario) (*result, error) {
	if sc.bin == 0 {
		sc.bin = 10 * time.Millisecond
	}
	w := &world{sc: sc, eng: sim.New[func()](epoch, sc.seed), from: sc.warmup, to: sc.warmup + sc.duration}
	for _, s := range sc.subs {
		w.cfg.Subscribers = append(w.cfg.Subscribers, gage.Subscriber{Name: s.name, Reservation: s.res, Limit: s.limit})
		w.names = append(w.names, s.name)
	}
	nb := int((sc.duration + sc.bin - 1) / sc.bin)
	w.res = &result{sc: sc, subs: make([]subResult, len(sc.subs)), bins: make([][]gage.Vector, len(sc.subs)), paced: make([][]time.Duration, len(sc.subs))}
	for i := range sc.subs {
		w.res.subs[i].spec = sc.subs[i]
		w.res.bins[i] = make([]gage.Vector, nb)
	}
	if sc.perGateway {
		w.res.gwBins = make([][][]gage.Vector, sc.gateways)
		for g := range w.res.gwBins {
			w.res.gwBins[g] = make([][]gage.Vector, len(sc.subs))
			for i := range sc.subs {
				w.res.gwBins[g][i] = make([]gage.Vector, nb)
			}
		}
	}
	mk, ok := kinds[sc.kind]
	if !ok {
		return nil, fmt.Errorf("gagesim: unknown scheduler %q", sc.kind)
	}
	for g := range sc.gateways {
		s, err := mk(w.cfg, gage.Options{Cycle: sc.cycle, AccountingCycle: sc.acct})
		if err != nil {
			return nil, fmt.Errorf("gagesim: %w", err)
		}
		est, err := gage.NewCapacityEstimator(gage.DefaultUnit, gage.EstimatorOptions{TTL: max(3*time.Second, 3*sc.acct)})
		if err != nil {
			return nil, fmt.Errorf("gagesim: %w", err)
		}
		gw := &gateway{id: g, name: fmt.Sprintf("gw%d", g), sched: s, est: est, wakeAt: -1, queued: map[uint64]*req{},
			meters: make([]gage.Meter, len(sc.subs)), avgCost: make([]float64, len(sc.subs))}
		for i := range gw.avgCost {
			gw.avgCost[i] = 1
		}
		if sc.pace {
			if gw.shaper, err = gage.NewShaper(w.cfg, gage.ShaperOptions{}); err != nil {
				return nil, fmt.Errorf("gagesim: %w", err)
			}
		}
		if sc.gateways > 1 {
			gw.split, err = gage.NewSplitter(gw.name, w.cfg, gage.SplitOptions{TTL: sc.ttl})
			if err != nil {
				return nil, fmt.Errorf("gagesim: %w", err)
			}
		}
		w.gws = append(w.gws, gw)
	}
	for b := range sc.backends {
		be := &backend{id: b, usage: make([][]acc, sc.gateways)}
		for g := range be.usage {
			be.usage[g] = make([]acc, len(sc.subs))
		}
		w.bes = append(w.bes, be)
		// Each node declares its nominal capacity when it joins, and then
		// reports every accounting cycle, the nodes out of phase.
		for _, gw := range w.gws {
			gw.est.Observe(w.eng.Time(), gage.NodeReport{Node: nodeName(b), Declared: w.backendRates()})
		}
		w.eng.At(sc.acct*time.Duration(b+1)/time.Duration(sc.backends), func() { w.report(be) })
	}
	for _, gw := range w.gws {
		w.applyCapacity(gw)
	}
	for i, s := range sc.subs {
		w.startArrivals(i, s)
	}
	if sc.gateways > 1 {
		w.eng.At(0, w.gossip)
	}
	if sc.killAt > 0 {
		w.eng.At(sc.killAt, func() { w.kill(w.gws[len(w.gws)-1]) })
	}
	// Run in slices so a cancelled context stops a long run.
	for t, end := time.Duration(0), w.to+drain; t < end; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t = min(t+time.Second, end)
		w.eng.RunUntil(t, func(f func()) { f() })
	}
	return w.res, nil
}

func nodeName(b int) string { return fmt.Sprintf("node%d", b) }

// backendRates is a backend's capacity per second in each resource: the
// CPU and disk of BackendGRPS generic requests, and its link.
func (w *world) backendRates() gage.Vector {
	v := gage.DefaultUnit.Times(w.sc.backendGRPS)
	v[gage.Net] = w.sc.backendNet
	return v
}

func (w *world) measured(t time.Duration) bool { return t >= w.from && t < w.to }

func (w *world) startArrivals(i int, s subSpec) {
	if s.demand <= 0 {
		return
	}
	rate := s.demand / s.sizes.meanCost(w.sc.seed)
	arr, size, place := w.eng.Rand(1000+uint64(i)), w.eng.Rand(2000+uint64(i)), w.eng.Rand(3000+uint64(i))
	gap := func() time.Duration {
		if s.constant {
			return time.Duration(float64(time.Second) / rate)
		}
		return time.Duration(arr.ExpFloat64() / rate * float64(time.Second))
	}
	var next func()
	next = func() {
		now := w.eng.Now()
		if now >= w.to {
			return
		}
		w.nextID++
		r := &req{id: w.nextID, sub: i, use: s.sizes.draw(size), arrived: now, gw: w.pickGateway(s.split, place)}
		if w.measured(now) {
			sr := &w.res.subs[i]
			sr.arrived = sr.arrived.Add(r.use)
			sr.nArrived++
		}
		w.gws[r.gw].arrive(w, r)
		w.eng.After(gap(), next)
	}
	w.eng.At(gap(), next)
}

// pickGateway draws a live gateway by the subscriber's weights; the
// clients of a dead gateway go to the live ones in proportion.
func (w *world) pickGateway(split []float64, r *rand.Rand) int {
	if split == nil {
		return 0
	}
	total := 0.0
	for g, x := range split {
		if !w.gws[g].dead {
			total += x
		}
	}
	u := r.Float64() * total
	last := 0
	for g, x := range split {
		if w.gws[g].dead || x == 0 {
			continue
		}
		last = g
		if u < x {
			return g
		}
		u -= x
	}
	return last
}

func (w *world) drop(r *req) {
	if w.measured(r.arrived) {
		sr := &w.res.subs[r.sub]
		sr.dropped = sr.dropped.Add(r.use)
		sr.nDropped++
	}
}

func (gw *gateway) arrive(w *world, r *req) {
	now := w.eng.Time()
	gw.meters[r.sub].Add(now, gw.avgCost[r.sub])
	err := gw.sched.Enqueue(now, gage.Request{ID: r.id, Subscriber: w.names[r.sub], Arrived: now})
	if err != nil {
		w.drop(r)
		return
	}
	gw.queued[r.id] = r
	gw.pump(w)
}

// pump dispatches all the scheduler lets go now and sets the wake-up.
func (gw *gateway) pump(w *world) {
	if gw.dead {
		return
	}
	now := w.eng.Time()
	for {
		d, ok := gw.sched.Next(now)
		if !ok {
			break
		}
		r := gw.queued[d.ID]
		delete(gw.queued, d.ID)
		be := w.pickBackend()
		if w.sc.exactCost {
			if err := gw.sched.Report(now, gage.Usage{Subscriber: w.names[r.sub], Requests: 1, Used: r.use}); err != nil {
				panic(err) // the simulation only reports its own subscribers
			}
		}
		w.eng.After(w.sc.netDelay, func() { be.arrive(w, r) })
	}
	t, ok := gw.sched.Wake(now)
	if !ok {
		return
	}
	at := t.Sub(epoch)
	if gw.wakeAt >= 0 && gw.wakeAt <= at && gw.wakeAt >= w.eng.Now() {
		return
	}
	gw.wakeAt = at
	w.eng.At(at, func() {
		if gw.wakeAt == at {
			gw.wakeAt = -1
		}
		gw.pump(w)
	})
}

// pickBackend is the node scheduler (§3.4): the least loaded backend, by
// requests waiting or in service. The simulation reads the backends'
// queues directly; the gateway will use Neptune's balancer.
func (w *world) pickBackend() *backend {
	best := -1
	n := len(w.bes)
	for k := range n {
		b := w.bes[(w.beRR+k)%n]
		if best < 0 || b.load() < w.bes[best].load() {
			best = b.id
		}
	}
	w.beRR = (w.beRR + 1) % n
	return w.bes[best]
}

func (b *backend) load() int { return b.n }

func (b *backend) arrive(w *world, r *req) {
	b.n++
	b.enter(w, r, 0)
}

// enter queues r at the first stage from st on that it uses.
func (b *backend) enter(w *world, r *req, st gage.Resource) {
	for ; st < gage.NumResources; st++ {
		if r.use[st] > 0 {
			s := &b.stages[st]
			s.q = append(s.q, r)
			if !s.busy {
				b.start(w, st)
			}
			return
		}
	}
	b.complete(w, r)
}

func (b *backend) start(w *world, st gage.Resource) {
	s := &b.stages[st]
	r := s.q[0]
	s.q = s.q[1:]
	s.busy, s.started = true, w.eng.Now()
	svc := time.Duration(r.use[st] / w.backendRates()[st] * float64(time.Second))
	w.eng.After(svc, func() {
		if st != gage.Net || !w.sc.pace { // paced bytes count as they leave the gateway
			w.accrue(r, st, r.use[st], s.started, w.eng.Now())
		}
		s.busyAcc += w.eng.Now() - max(s.started, b.lastTick)
		s.busy = false
		if len(s.q) > 0 {
			b.start(w, st)
		}
		b.enter(w, r, st+1)
	})
}

func (b *backend) complete(w *world, r *req) {
	now := w.eng.Now()
	b.n--
	b.total = b.total.Add(r.use)
	switch {
	case w.sc.exactCost: // reported at dispatch
	case w.sc.perResponse:
		gw, u := w.gws[r.gw], gage.Usage{Subscriber: w.names[r.sub], Requests: 1, Used: r.use}
		w.eng.After(w.sc.netDelay, func() { gw.receive(w, []gage.Usage{u}, nil) })
	default:
		a := &b.usage[r.gw][r.sub]
		a.n++
		a.used = a.used.Add(r.use)
	}
	if w.measured(r.arrived) {
		sr := &w.res.subs[r.sub]
		sr.completed = sr.completed.Add(r.use)
	}
	if w.measured(now) {
		sr := &w.res.subs[r.sub]
		sr.served = sr.served.Add(r.use)
		sr.nServed++
	}
	if w.sc.pace && r.use[gage.Net] > 0 {
		w.eng.After(w.sc.netDelay, func() {
			w.egress(w.gws[r.gw].shaper.Response(w.eng.Time(), w.names[r.sub], int(r.use[gage.Net])), r, w.eng.Now(), w.eng.Now())
		})
	}
}

// egress sends r's response out of its gateway, paced by p, in the chunks
// p cuts, each asked for as the one before starts to leave, as the gateway
// writes them; end is when the chunk before ends. The bytes leave at the
// backend link's rate (the gateway's link is as fast as a node's).
func (w *world) egress(p *gage.Paced, r *req, since, end time.Duration) {
	at, n := p.Next(w.eng.Time())
	if n == 0 {
		if w.measured(r.arrived) {
			w.res.paced[r.sub] = append(w.res.paced[r.sub], end-since)
		}
		return
	}
	due := at.Sub(epoch)
	w.eng.At(due, func() {
		out := time.Duration(float64(n) / w.sc.backendNet * float64(time.Second))
		w.accrue(r, gage.Net, float64(n), due, due+out)
		w.egress(p, r, since, due+out)
	})
}

// accrue spreads total of r's use of resource st over its service
// [from, to) in the usage bins: resource usage accrues while it is used,
// as the kernel's per-thread accounting sees it (§3.5), so a long request
// does not land in one bin at its end.
func (w *world) accrue(r *req, st gage.Resource, total float64, from, to time.Duration) {
	span := to - from
	for t := from; t < to; {
		i := (t - w.from) / w.sc.bin
		end := min(w.from+(i+1)*w.sc.bin, to)
		if w.measured(t) {
			amount := total
			if span > 0 {
				amount = total * float64(end-t) / float64(span)
			}
			w.res.bins[r.sub][i][st] += amount
			if w.res.gwBins != nil {
				w.res.gwBins[r.gw][r.sub][i][st] += amount
			}
		}
		t = end
	}
}

// report is a backend's accounting cycle: per-subscriber usage to the
// gateway that dispatched it, and its own total and utilization to every
// gateway (§3.4, §3.5).
func (w *world) report(b *backend) {
	now := w.eng.Now()
	var busy gage.Vector
	for i := range b.stages {
		s := &b.stages[i]
		if s.busy {
			s.busyAcc += now - max(s.started, b.lastTick)
		}
		busy[i] = min(float64(s.busyAcc)/float64(w.sc.acct), 1)
		s.busyAcc = 0
	}
	nr := gage.NodeReport{Node: nodeName(b.id), Interval: w.sc.acct, Used: b.total, Busy: busy}
	b.lastTick, b.total = now, gage.Vector{}
	for g, gw := range w.gws {
		var us []gage.Usage
		for s, a := range b.usage[g] {
			if a.n > 0 {
				us = append(us, gage.Usage{Subscriber: w.names[s], Requests: a.n, Used: a.used})
			}
		}
		clear(b.usage[g])
		if gw.dead {
			continue
		}
		w.eng.After(w.sc.netDelay, func() { gw.receive(w, us, &nr) })
	}
	w.eng.After(w.sc.acct, func() { w.report(b) })
}

// receive takes usage reports and, if nr is set, a node's accounting
// cycle.
func (gw *gateway) receive(w *world, us []gage.Usage, nr *gage.NodeReport) {
	if gw.dead {
		return
	}
	now := w.eng.Time()
	for _, u := range us {
		if err := gw.sched.Report(now, u); err != nil {
			panic(err) // the simulation only reports its own subscribers
		}
		if u.Requests > 0 {
			i := w.subIndex(u.Subscriber)
			gw.avgCost[i] = 0.8*gw.avgCost[i] + 0.2*gage.DefaultUnit.Cost(u.Used)/float64(u.Requests)
		}
	}
	if nr != nil {
		gw.est.Observe(now, *nr)
		w.applyCapacity(gw)
	}
	gw.pump(w)
}

func (w *world) subIndex(name string) int {
	for i, n := range w.names {
		if n == name {
			return i
		}
	}
	return -1
}

// applyCapacity hands gw the capacity (its share of it, with several
// gateways) and its shares of the reservations.
func (w *world) applyCapacity(gw *gateway) {
	now := w.eng.Time()
	c := gw.est.Capacity(now)
	if w.sc.capacity > 0 {
		c = gage.DefaultUnit.Times(w.sc.capacity)
	}
	if gw.split == nil {
		gw.sched.SetCapacity(now, c)
		return
	}
	if t := w.eng.Now(); w.sc.killAt > 0 && t >= w.sc.killAt && w.res.shareBack == 0 && gw.id == 0 && len(gw.split.Live(now)) == 1 {
		w.res.shareBack = t
	}
	if err := gw.split.Apply(now, gw.sched, c); err != nil {
		panic(err)
	}
	if gw.shaper != nil {
		for _, n := range w.names {
			gw.shaper.SetShare(n, gw.split.Fraction(now, n))
		}
	}
}

// gossip is one round: every live gateway publishes its demand, which
// reaches the others a network delay later.
func (w *world) gossip() {
	now := w.eng.Time()
	for _, gw := range w.gws {
		if gw.dead {
			continue
		}
		d := make(map[string]float64, len(w.names))
		for i, n := range w.names {
			d[n] = gw.meters[i].Rate(now)
		}
		msg := gw.split.Local(now, d)
		w.applyCapacity(gw)
		for _, peer := range w.gws {
			if peer == gw || peer.dead {
				continue
			}
			w.eng.After(w.sc.netDelay, func() {
				if !peer.dead {
					peer.split.Merge(w.eng.Time(), msg)
				}
			})
		}
	}
	w.eng.After(w.sc.gossip, w.gossip)
}

// kill stops gw: what it had queued is lost, its reports go nowhere, and
// its clients move to the other gateways.
func (w *world) kill(gw *gateway) {
	gw.dead = true
	for _, r := range gw.queued {
		w.drop(r)
	}
	clear(gw.queued)
}
