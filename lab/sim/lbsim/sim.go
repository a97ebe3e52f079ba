// Package sim is a seeded discrete-event simulator of a replicated service:
// clients, each with its own balance.Policy, send requests over a network
// with fixed delays to servers that are non-preemptive FIFO queues. It drives
// the same policy code as the node and reproduces the simulations of
// dissertation ch. 3 (Figs 3.1–3.3) and the load-balancing goals of issue 3.
package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
)

// Config describes one simulated run.
type Config struct {
	Workload Workload
	// Load is the offered load: arrival rate × mean service time divided by
	// the cluster's capacity in servers (a SlowFactor-times slower server
	// counts as 1/SlowFactor of one), so a degraded cluster is as busy as a
	// healthy one and only the balancing differs.
	Load    float64
	Servers int
	// Clients each run their own policy instance; requests are assigned to
	// clients uniformly at random.
	Clients int
	// Requests is how many requests are measured, after Warmup unmeasured ones.
	Requests, Warmup int
	// NetDelay is the one-way delay of a request and of its response. The
	// dissertation uses half a TCP round trip with connection setup: 516 µs.
	NetDelay time.Duration
	// PollDelay is the one-way delay of a poll, its answer and a broadcast
	// (half the paper's 290 µs UDP round trip).
	PollDelay time.Duration
	// Policy is what every client runs.
	Policy balance.Config
	// SlowServers servers (the first ones) take SlowFactor times longer to
	// serve each request.
	SlowServers int
	SlowFactor  float64
	// Seed fixes the arrival trace (shared by every policy run with the same
	// seed, so contenders see identical requests) and the policies' sources.
	Seed uint64
}

// DefaultConfig is Poisson/Exp at 90% load on 16 servers with 16 clients and
// the paper's network delays.
func DefaultConfig() Config {
	return Config{
		Workload:   PoissonExp,
		Load:       0.9,
		Servers:    16,
		Clients:    16,
		Requests:   100_000,
		Warmup:     10_000,
		NetDelay:   516 * time.Microsecond,
		PollDelay:  145 * time.Microsecond,
		Policy:     balance.DefaultConfig(),
		SlowFactor: 1,
		Seed:       1,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Workload.Service.sample == nil || c.Workload.Interarrival.sample == nil:
		return errors.New("sim: Workload must be set (see Workloads)")
	case c.Load <= 0:
		return fmt.Errorf("sim: Load must be > 0, got %g", c.Load)
	case c.Servers < 1:
		return fmt.Errorf("sim: Servers must be >= 1, got %d", c.Servers)
	case c.Clients < 1:
		return fmt.Errorf("sim: Clients must be >= 1, got %d", c.Clients)
	case c.Requests < 1:
		return fmt.Errorf("sim: Requests must be >= 1, got %d", c.Requests)
	case c.Warmup < 0:
		return fmt.Errorf("sim: Warmup must be >= 0, got %d", c.Warmup)
	case c.NetDelay < 0:
		return fmt.Errorf("sim: NetDelay must be >= 0, got %v", c.NetDelay)
	case c.PollDelay < 0:
		return fmt.Errorf("sim: PollDelay must be >= 0, got %v", c.PollDelay)
	case c.SlowServers < 0 || c.SlowServers > c.Servers:
		return fmt.Errorf("sim: SlowServers must be in [0, Servers], got %d", c.SlowServers)
	case c.SlowFactor <= 0:
		return fmt.Errorf("sim: SlowFactor must be > 0, got %g", c.SlowFactor)
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("sim: Policy: %w", err)
	}
	return nil
}

// Result summarises the measured requests of a run. Response times run from
// the request's arrival at its client to the response's arrival back there,
// so they include polling.
type Result struct {
	Mean, P50, P99 time.Duration
	// MeanPoll is the mean time from arrival to the choice of a server.
	MeanPoll time.Duration
	// PollsPerRequest counts poll messages sent per request.
	PollsPerRequest float64
	Measured        int
}

// Ratio returns r's mean and p99 divided by base's.
func (r Result) Ratio(base Result) (mean, p99 float64) {
	return float64(r.Mean) / float64(base.Mean), float64(r.P99) / float64(base.P99)
}

type eventKind uint8

const (
	evArrive       eventKind = iota // request reaches its client
	evPollAtServer                  // poll reaches a server
	evPollAnswer                    // poll answer reaches the client
	evDeadline                      // the plan's wait is over
	evAtServer                      // request reaches its server
	evServiceDone                   // server finishes its head request
	evResponse                      // response reaches the client
	evPush                          // server broadcasts its load
	evPushArrive                    // the broadcast reaches the clients
)

type event struct {
	at     time.Duration
	seq    uint64 // FIFO among simultaneous events, for determinism
	kind   eventKind
	server int32
	req    int32
	queue  int32
}

// eventHeap is a binary min-heap on (at, seq).
type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	return h[i].at < h[j].at || (h[i].at == h[j].at && h[i].seq < h[j].seq)
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s.less(l, m) {
			m = l
		}
		if l+1 < n && s.less(l+1, m) {
			m = l + 1
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

type request struct {
	arrive  time.Duration
	service time.Duration
	client  int32
	server  int32
	decided bool
	waiting int // poll answers still expected
	answers []balance.Load
	chosen  time.Duration
}

type server struct {
	fifo     []int32 // request ids; fifo[0] is in service
	inflight int     // requests on the wire towards it
	speed    float64 // service-time multiplier
}

type run struct {
	cfg      Config
	epoch    time.Time
	now      time.Duration
	seq      uint64
	events   eventHeap
	reqs     []request
	servers  []server
	names    []string
	index    map[string]int32
	policies []balance.Policy
	exact    bool // oracle: report exact loads before each choice
	pushRNG  *rand.Rand
	done     int
	polls    int
	lat      []time.Duration
	pollTime time.Duration
}

// Run simulates cfg and summarises the measured requests.
func Run(cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	r := &run{
		cfg:     cfg,
		epoch:   time.Date(2001, 7, 23, 12, 0, 0, 0, time.UTC),
		servers: make([]server, cfg.Servers),
		index:   make(map[string]int32, cfg.Servers),
		exact:   cfg.Policy.Policy == balance.NameOracle,
		pushRNG: rand.New(rand.NewPCG(cfg.Seed, 0xb0ad)),
	}
	for i := range r.servers {
		r.servers[i].speed = 1
		if i < cfg.SlowServers {
			r.servers[i].speed = cfg.SlowFactor
		}
		name := strconv.Itoa(i)
		r.names = append(r.names, name)
		r.index[name] = int32(i)
	}
	for i := range cfg.Clients {
		p, err := balance.New(cfg.Policy, rand.New(rand.NewPCG(cfg.Seed, uint64(1000+i))))
		if err != nil {
			return Result{}, fmt.Errorf("sim: %w", err)
		}
		r.policies = append(r.policies, p)
	}
	capacity := float64(cfg.Servers-cfg.SlowServers) + float64(cfg.SlowServers)/cfg.SlowFactor
	r.reqs = trace(cfg.Workload, cfg.Load*capacity, cfg.Clients, cfg.Warmup+cfg.Requests, cfg.Seed)
	r.lat = make([]time.Duration, 0, cfg.Requests)
	for i := range r.reqs {
		r.schedule(event{at: r.reqs[i].arrive, kind: evArrive, req: int32(i)})
	}
	if cfg.Policy.Policy == balance.NameBroadcast {
		for s := range r.servers {
			r.schedule(event{at: r.pushInterval(), kind: evPush, server: int32(s)})
		}
	}
	for r.done < len(r.reqs) {
		r.step(r.events.pop())
	}
	return r.result(), nil
}

// trace draws n requests of workload w that keep busy servers busy (a load
// in units of servers): arrival times, service demands and clients. It
// depends only on its arguments, so every policy run with the same seed sees
// the same requests.
func trace(w Workload, busy float64, clients, n int, seed uint64) []request {
	rng := rand.New(rand.NewPCG(seed, 0x7ace))
	inter := w.Interarrival.Scaled(time.Duration(float64(w.Service.Mean) / busy))
	reqs := make([]request, n)
	var t time.Duration
	for i := range reqs {
		t += inter.Sample(rng)
		reqs[i] = request{arrive: t, service: w.Service.Sample(rng), client: int32(rng.IntN(clients)), server: -1}
	}
	return reqs
}

func (r *run) schedule(e event) {
	e.seq = r.seq
	r.seq++
	r.events.push(e)
}

func (r *run) time() time.Time { return r.epoch.Add(r.now) }

func (r *run) pushInterval() time.Duration {
	return time.Duration((0.5 + r.pushRNG.Float64()) * float64(r.cfg.Policy.BroadcastInterval))
}

func (r *run) step(e event) {
	r.now = e.at
	switch e.kind {
	case evArrive:
		r.arrive(e.req)
	case evPollAtServer:
		r.schedule(event{at: r.now + r.cfg.PollDelay, kind: evPollAnswer, server: e.server, req: e.req,
			queue: int32(len(r.servers[e.server].fifo))})
	case evPollAnswer:
		q := &r.reqs[e.req]
		l := balance.Load{Replica: r.names[e.server], Queue: int(e.queue), RTT: r.now - q.arrive}
		if q.decided {
			// Late answers still carry information for policies that keep it.
			r.policies[q.client].Report(r.time(), l)
			return
		}
		q.answers = append(q.answers, l)
		if q.waiting--; q.waiting == 0 {
			r.decide(e.req)
		}
	case evDeadline:
		if !r.reqs[e.req].decided {
			r.decide(e.req)
		}
	case evAtServer:
		s := &r.servers[e.server]
		s.inflight--
		s.fifo = append(s.fifo, e.req)
		if len(s.fifo) == 1 {
			r.startService(e.server)
		}
	case evServiceDone:
		s := &r.servers[e.server]
		id := s.fifo[0]
		s.fifo = s.fifo[1:]
		r.schedule(event{at: r.now + r.cfg.NetDelay, kind: evResponse, req: id, server: e.server})
		if len(s.fifo) > 0 {
			r.startService(e.server)
		}
	case evResponse:
		q := &r.reqs[e.req]
		lat := r.now - q.arrive
		r.policies[q.client].Done(r.time(), r.names[q.server], lat)
		if int(e.req) >= r.cfg.Warmup {
			r.lat = append(r.lat, lat)
			r.pollTime += q.chosen - q.arrive
		}
		r.done++
	case evPush:
		r.schedule(event{at: r.now + r.cfg.PollDelay, kind: evPushArrive, server: e.server,
			queue: int32(len(r.servers[e.server].fifo))})
		if r.done < len(r.reqs) {
			r.schedule(event{at: r.now + r.pushInterval(), kind: evPush, server: e.server})
		}
	case evPushArrive:
		l := balance.Load{Replica: r.names[e.server], Queue: int(e.queue)}
		for _, p := range r.policies {
			p.Report(r.time(), l)
		}
	}
}

func (r *run) arrive(id int32) {
	q := &r.reqs[id]
	plan := r.policies[q.client].Plan(r.time(), r.names)
	if len(plan.Poll) == 0 {
		r.decide(id)
		return
	}
	if int(id) >= r.cfg.Warmup {
		r.polls += len(plan.Poll)
	}
	q.waiting = len(plan.Poll)
	for _, name := range plan.Poll {
		s, ok := r.index[name]
		if !ok {
			panic(fmt.Sprintf("sim: policy polled unknown replica %q", name))
		}
		r.schedule(event{at: r.now + r.cfg.PollDelay, kind: evPollAtServer, server: s, req: id})
	}
	r.schedule(event{at: r.now + plan.Wait, kind: evDeadline, req: id})
}

func (r *run) decide(id int32) {
	q := &r.reqs[id]
	p := r.policies[q.client]
	now := r.time()
	if r.exact {
		for i, s := range r.servers {
			p.Report(now, balance.Load{Replica: r.names[i], Queue: len(s.fifo) + s.inflight})
		}
	}
	name := p.Choose(now, r.names, q.answers)
	s, ok := r.index[name]
	if !ok {
		panic(fmt.Sprintf("sim: policy chose unknown replica %q", name))
	}
	p.Sent(now, name)
	q.decided, q.server, q.chosen, q.answers = true, s, r.now, nil
	r.servers[s].inflight++
	r.schedule(event{at: r.now + r.cfg.NetDelay, kind: evAtServer, server: s, req: id})
}

func (r *run) startService(s int32) {
	srv := &r.servers[s]
	d := time.Duration(float64(r.reqs[srv.fifo[0]].service) * srv.speed)
	r.schedule(event{at: r.now + d, kind: evServiceDone, server: s})
}

func (r *run) result() Result {
	n := len(r.lat)
	var sum time.Duration
	for _, l := range r.lat {
		sum += l
	}
	slices.Sort(r.lat)
	return Result{
		Mean:            sum / time.Duration(n),
		P50:             r.lat[n/2],
		P99:             r.lat[min(n-1, n*99/100)],
		MeanPoll:        r.pollTime / time.Duration(n),
		PollsPerRequest: float64(r.polls) / float64(n),
		Measured:        n,
	}
}
