// Package lbsim is a seeded discrete-event simulation of a replicated service:
// clients, each with its own balance.Policy, send requests over a network
// with fixed delays to servers that are non-preemptive FIFO queues. It drives
// the same policy code as the node and reproduces the simulations of
// dissertation ch. 3 (Figs 3.1–3.3) and the load-balancing goals of issue 3.
package lbsim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/lab/report"
	"github.com/neptune-cluster/neptune/lab/sim"
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
	// PushIdle, if > 0, makes a server that runs out of work (and every
	// server at the start) push queue 0 to that many random clients
	// (join-idle-queue). PushChange, if > 0, makes every server push its
	// queue to that many random clients (all of them if >= Clients)
	// whenever it changes. Both arrive PollDelay later, through Report; the
	// push policy is built for them.
	PushIdle, PushChange int
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
		return errors.New("lbsim: Workload must be set (see Workloads)")
	case c.Load <= 0:
		return fmt.Errorf("lbsim: Load must be > 0, got %g", c.Load)
	case c.Servers < 1:
		return fmt.Errorf("lbsim: Servers must be >= 1, got %d", c.Servers)
	case c.Clients < 1:
		return fmt.Errorf("lbsim: Clients must be >= 1, got %d", c.Clients)
	case c.Requests < 1:
		return fmt.Errorf("lbsim: Requests must be >= 1, got %d", c.Requests)
	case c.Warmup < 0:
		return fmt.Errorf("lbsim: Warmup must be >= 0, got %d", c.Warmup)
	case c.NetDelay < 0:
		return fmt.Errorf("lbsim: NetDelay must be >= 0, got %v", c.NetDelay)
	case c.PollDelay < 0:
		return fmt.Errorf("lbsim: PollDelay must be >= 0, got %v", c.PollDelay)
	case c.SlowServers < 0 || c.SlowServers > c.Servers:
		return fmt.Errorf("lbsim: SlowServers must be in [0, Servers], got %d", c.SlowServers)
	case c.SlowFactor <= 0:
		return fmt.Errorf("lbsim: SlowFactor must be > 0, got %g", c.SlowFactor)
	case c.PushIdle < 0 || c.PushChange < 0:
		return fmt.Errorf("lbsim: PushIdle and PushChange must be >= 0, got %d, %d", c.PushIdle, c.PushChange)
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("lbsim: Policy: %w", err)
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
	// PollsPerRequest counts polls and pushed loads sent per request.
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
	evPushOne                       // a push reaches one client (req holds its index)
)

// event is what the engine queues; the time is the engine's.
type event struct {
	kind   eventKind
	server int32
	req    int32
	queue  int32
}

// The random streams of a run (see sim.Engine.Rand); each policy instance
// draws from streamPolicy + its client index.
const (
	streamTrace      = 0x7ace
	streamPush       = 0xb0ad
	streamInaccuracy = 0xf31
	streamIdle       = 0x1d1e
	streamPolicy     = 1000
)

type request struct {
	arrive  time.Duration
	service time.Duration
	client  int32
	server  int32 // chosen; -1 until then
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
	eng      *sim.Engine[event]
	reqs     []request
	servers  []server
	names    []string
	index    map[string]int32
	policies []balance.Policy
	exact    bool // oracle: report exact loads before each choice
	pushRNG  *rand.Rand
	idleRNG  *rand.Rand
	done     int
	polls    int
	pushes   int // push datagrams, counted with the polls per request
	lat      []time.Duration
	pollTime time.Duration
}

// Simulate simulates cfg and summarises the measured requests.
func Simulate(cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	eng := sim.New[event](time.Date(2001, 7, 23, 12, 0, 0, 0, time.UTC), cfg.Seed)
	r := &run{
		cfg:     cfg,
		eng:     eng,
		servers: make([]server, cfg.Servers),
		index:   make(map[string]int32, cfg.Servers),
		exact:   cfg.Policy.Policy == balance.NameOracle,
		pushRNG: eng.Rand(streamPush),
		idleRNG: eng.Rand(streamIdle),
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
		p, err := balance.New(cfg.Policy, eng.Rand(streamPolicy+uint64(i)))
		if err != nil {
			return Result{}, fmt.Errorf("lbsim: %w", err)
		}
		r.policies = append(r.policies, p)
	}
	capacity := float64(cfg.Servers-cfg.SlowServers) + float64(cfg.SlowServers)/cfg.SlowFactor
	for a := range Trace(cfg.Workload, cfg.Load*capacity, cfg.Clients, cfg.Seed) {
		if len(r.reqs) == cfg.Warmup+cfg.Requests {
			break
		}
		r.reqs = append(r.reqs, request{arrive: a.At, service: a.Service, client: int32(a.Client), server: -1})
	}
	r.lat = make([]time.Duration, 0, cfg.Requests)
	for i := range r.reqs {
		eng.At(r.reqs[i].arrive, event{kind: evArrive, req: int32(i)})
	}
	if cfg.Policy.Policy == balance.NameBroadcast {
		for s := range r.servers {
			eng.At(r.pushInterval(), event{kind: evPush, server: int32(s)})
		}
	}
	for s := range r.servers {
		r.pushIdle(int32(s))
	}
	for r.done < len(r.reqs) {
		ev, _ := eng.Step()
		r.step(ev)
	}
	return r.result(), nil
}

func (r *run) pushInterval() time.Duration {
	return time.Duration((0.5 + r.pushRNG.Float64()) * float64(r.cfg.Policy.BroadcastInterval))
}

func (r *run) step(e event) {
	switch e.kind {
	case evArrive:
		r.arrive(e.req)
	case evPollAtServer:
		r.eng.After(r.cfg.PollDelay, event{kind: evPollAnswer, server: e.server, req: e.req,
			queue: int32(len(r.servers[e.server].fifo))})
	case evPollAnswer:
		q := &r.reqs[e.req]
		l := balance.Load{Replica: r.names[e.server], Queue: int(e.queue), RTT: r.eng.Now() - q.arrive}
		if q.decided {
			// Late answers still carry information for policies that keep it.
			r.policies[q.client].Report(r.eng.Time(), l)
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
		r.pushChange(e.server)
	case evServiceDone:
		s := &r.servers[e.server]
		id := s.fifo[0]
		s.fifo = s.fifo[1:]
		r.eng.After(r.cfg.NetDelay, event{kind: evResponse, req: id, server: e.server})
		if len(s.fifo) > 0 {
			r.startService(e.server)
		} else {
			r.pushIdle(e.server)
		}
		r.pushChange(e.server)
	case evResponse:
		q := &r.reqs[e.req]
		lat := r.eng.Now() - q.arrive
		r.policies[q.client].Done(r.eng.Time(), r.names[q.server], lat)
		if int(e.req) >= r.cfg.Warmup {
			r.lat = append(r.lat, lat)
			r.pollTime += q.chosen - q.arrive
		}
		r.done++
	case evPush:
		r.eng.After(r.cfg.PollDelay, event{kind: evPushArrive, server: e.server,
			queue: int32(len(r.servers[e.server].fifo))})
		if r.done < len(r.reqs) {
			r.eng.After(r.pushInterval(), event{kind: evPush, server: e.server})
		}
	case evPushOne:
		r.policies[e.req].Report(r.eng.Time(), balance.Load{Replica: r.names[e.server], Queue: int(e.queue)})
	case evPushArrive:
		l := balance.Load{Replica: r.names[e.server], Queue: int(e.queue)}
		for _, p := range r.policies {
			p.Report(r.eng.Time(), l)
		}
	}
}

// pushIdle tells PushIdle distinct random clients that server s is idle.
func (r *run) pushIdle(s int32) { r.pushTo(s, r.cfg.PushIdle) }

// pushChange pushes server s's queue to PushChange random clients.
func (r *run) pushChange(s int32) { r.pushTo(s, r.cfg.PushChange) }

// pushTo pushes server s's queue to n distinct random clients.
func (r *run) pushTo(s int32, n int) {
	if n == 0 || r.done >= len(r.reqs) {
		return
	}
	q := int32(len(r.servers[s].fifo))
	if n >= r.cfg.Clients {
		r.eng.After(r.cfg.PollDelay, event{kind: evPushArrive, server: s, queue: q})
		r.pushes += r.cfg.Clients
		return
	}
	for _, c := range r.idleRNG.Perm(r.cfg.Clients)[:n] {
		r.eng.After(r.cfg.PollDelay, event{kind: evPushOne, server: s, req: int32(c), queue: q})
	}
	r.pushes += n
}

func (r *run) arrive(id int32) {
	q := &r.reqs[id]
	plan := r.policies[q.client].Plan(r.eng.Time(), r.names)
	if int(id) >= r.cfg.Warmup {
		r.polls += len(plan.Poll) + len(plan.Probe)
	}
	// Asynchronous probes: their answers reach a decided request, so they
	// go to Report (evPollAnswer), for the client's later calls.
	r.sendPolls(id, plan.Probe)
	if len(plan.Poll) == 0 {
		r.decide(id)
		return
	}
	q.waiting = len(plan.Poll)
	r.sendPolls(id, plan.Poll)
	r.eng.After(plan.Wait, event{kind: evDeadline, req: id})
}

// sendPolls sends a poll to each named server on behalf of request id.
func (r *run) sendPolls(id int32, names []string) {
	for _, name := range names {
		s, ok := r.index[name]
		if !ok {
			panic(fmt.Sprintf("lbsim: policy polled unknown replica %q", name))
		}
		r.eng.After(r.cfg.PollDelay, event{kind: evPollAtServer, server: s, req: id})
	}
}

func (r *run) decide(id int32) {
	q := &r.reqs[id]
	p := r.policies[q.client]
	now := r.eng.Time()
	if r.exact {
		for i, s := range r.servers {
			p.Report(now, balance.Load{Replica: r.names[i], Queue: len(s.fifo) + s.inflight})
		}
	}
	name := p.Choose(now, r.names, q.answers)
	s, ok := r.index[name]
	if !ok {
		panic(fmt.Sprintf("lbsim: policy chose unknown replica %q", name))
	}
	p.Sent(now, name)
	q.decided, q.server, q.chosen, q.answers = true, s, r.eng.Now(), nil
	r.servers[s].inflight++
	r.eng.After(r.cfg.NetDelay, event{kind: evAtServer, server: s, req: id})
}

func (r *run) startService(s int32) {
	srv := &r.servers[s]
	d := time.Duration(float64(r.reqs[srv.fifo[0]].service) * srv.speed)
	r.eng.After(d, event{kind: evServiceDone, server: s})
}

func (r *run) result() Result {
	n := len(r.lat)
	s := report.Summarize(r.lat)
	return Result{
		Mean:            s.Mean,
		P50:             s.P50,
		P99:             s.P99,
		MeanPoll:        r.pollTime / time.Duration(n),
		PollsPerRequest: float64(r.polls+r.pushes*len(r.lat)/len(r.reqs)) / float64(n),
		Measured:        n,
	}
}
