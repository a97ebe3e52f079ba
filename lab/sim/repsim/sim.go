// Package repsim simulates a replicated, partitioned service under skewed
// load, to reproduce dissertation Fig 5.2 (§5.4.2): with 8 nodes, 64
// partitions and 10% writes at level 2, replication costs throughput
// under balanced load (every write runs on every replica) but wins under
// skew, because the reads of a hot partition are spread over its
// replicas ("almost three times as fast" at degree 4 when every request
// goes to one partition). A 2-core machine cannot show that with
// processes (issue 17), so it runs here on virtual time.
//
// What is the real code: each client chooses the replica of a read with
// the load-balancing policy the client library runs (internal/balance,
// prequal by default), polling replicas' queue lengths with the paper's
// delays. What is modelled: nodes are FIFO servers that drop a request
// whose deadline passed while it queued (as the dispatcher does); a
// write goes to the partition's primary, costs it its execution plus a
// propagation per secondary, and then runs on every secondary (level 2:
// the client's answer does not wait for them, their load is real).
package repsim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/lab/sim"
)

// Config describes one simulated run at one offered rate.
type Config struct {
	Nodes, Partitions int
	// Degree is the replicas per partition; 1 is no replication (NoRep:
	// no propagation cost, as the paper's stripped-down Neptune).
	Degree int
	// Imbalance is the share of requests that go to the most popular
	// partition (1/Partitions: balanced; 1: all to one), the others
	// following a Zipf distribution (§5.4.2).
	Imbalance float64
	// WriteFraction of requests are writes.
	WriteFraction float64
	// Read and Write are the mean service times (exponential) of a read
	// and of a write's execution; Propagate is the cost of a write's
	// propagation, paid by the primary once per secondary and by each
	// secondary once.
	Read, Write, Propagate time.Duration
	// Rate is the offered load, requests per second (Poisson).
	Rate float64
	// Duration of measured arrivals, after Warmup unmeasured ones.
	Duration, Warmup time.Duration
	// Deadline: a request counts as completed if its answer is back
	// within it (the paper: 2 s); a node drops one that waited past it.
	Deadline time.Duration
	// NetDelay is one way of a request, response or propagation;
	// PollDelay one way of a load poll.
	NetDelay, PollDelay time.Duration
	Clients             int
	Policy              balance.Config
	Seed                uint64
}

// DefaultConfig is Fig 5.2's setup: 8 nodes, 64 partitions, 10% writes,
// 40 s measured (long enough for a rate 5% above capacity to build a
// deadline's worth of backlog),
// a read 7 ms and a write 2.8 ms (one node without replication then
// serves 152 requests/s, the paper's single-node figure, and a read costs
// more than a write as in the paper's forum), a propagation 0.3 ms, the
// 2 s deadline, the network delays of the ch. 3 simulations and 16
// clients running the default policy.
func DefaultConfig() Config {
	return Config{
		Nodes: 8, Partitions: 64, Degree: 4, Imbalance: 1.0 / 64, WriteFraction: 0.1,
		Read: 7 * time.Millisecond, Write: 2800 * time.Microsecond, Propagate: 300 * time.Microsecond,
		Rate: 500, Duration: 40 * time.Second, Warmup: 5 * time.Second, Deadline: 2 * time.Second,
		NetDelay: 516 * time.Microsecond, PollDelay: 145 * time.Microsecond, Clients: 16,
		Policy: balance.DefaultConfig(), Seed: 1,
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Partitions < 1:
		return fmt.Errorf("repsim: nodes and partitions must be >= 1, got %d and %d", c.Nodes, c.Partitions)
	case c.Degree < 1 || c.Degree > c.Nodes:
		return fmt.Errorf("repsim: degree must be in [1, nodes=%d], got %d", c.Nodes, c.Degree)
	case c.Imbalance <= 0 || c.Imbalance > 1:
		return fmt.Errorf("repsim: imbalance must be in (0, 1], got %g", c.Imbalance)
	case c.WriteFraction < 0 || c.WriteFraction > 1:
		return fmt.Errorf("repsim: write fraction must be in [0, 1], got %g", c.WriteFraction)
	case c.Read <= 0 || c.Write <= 0 || c.Propagate < 0:
		return errors.New("repsim: read and write times must be > 0, propagation >= 0")
	case c.Rate <= 0 || c.Duration <= 0 || c.Warmup < 0 || c.Deadline <= 0:
		return errors.New("repsim: rate, duration and deadline must be > 0, warm-up >= 0")
	case c.Clients < 1:
		return fmt.Errorf("repsim: clients must be >= 1, got %d", c.Clients)
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("repsim: policy: %w", err)
	}
	return nil
}

// Result of one run: the measured requests and how many were answered
// within the deadline, over the whole measured window and over its last
// fifth (Tail). Slightly above capacity the backlog grows slowly, and
// requests are late only once it holds a deadline's worth of work: the
// tail shows it first.
type Result struct {
	Measured, OnTime         int
	TailMeasured, TailOnTime int
}

// OnTimeFraction is the lower of the on-time fractions of the whole
// window and of its tail.
func (r Result) OnTimeFraction() float64 {
	if r.Measured == 0 || r.TailMeasured == 0 {
		return 0
	}
	return min(float64(r.OnTime)/float64(r.Measured), float64(r.TailOnTime)/float64(r.TailMeasured))
}

type kind uint8

const (
	evArrive    kind = iota // a request reaches its client
	evPollAt                // a poll reaches a node
	evPollBack              // its answer reaches the client
	evPollLimit             // the plan's wait is over
	evAtNode                // a request or propagation reaches a node
	evDone                  // a node finishes its head job
	evAnswer                // the answer reaches the client
)

type event struct {
	kind kind
	node int32
	req  int32
	load int32
}

// A job on a node: a client's request (req ≥ 0), or a write's run on a
// secondary (req < 0; never dropped: a committed write must run).
type job struct {
	req     int32
	service time.Duration
}

type request struct {
	arrive  time.Duration
	client  int32
	part    int32
	write   bool
	node    int32
	decided bool
	waiting int
	answers []balance.Load
}

type node struct {
	fifo []job
}

type run struct {
	cfg      Config
	eng      *sim.Engine[event]
	rng      *rand.Rand // service times
	reqs     []request
	nodes    []node
	names    []string
	replicas [][]string // per partition, node names; [0] is the primary
	index    map[string]int32
	policies []balance.Policy
	end      time.Duration // arrivals stop
	res      Result
	open     int // requests not yet answered or dropped
}

// Random streams.
const (
	streamArrivals = 0xa77
	streamService  = 0x5e7
	streamPolicy   = 1000
)

// Simulate runs cfg.
func Simulate(cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	eng := sim.New[event](time.Date(2002, 6, 1, 0, 0, 0, 0, time.UTC), cfg.Seed)
	r := &run{cfg: cfg, eng: eng, rng: eng.Rand(streamService), nodes: make([]node, cfg.Nodes), index: map[string]int32{},
		end: cfg.Warmup + cfg.Duration}
	for i := range cfg.Nodes {
		r.names = append(r.names, strconv.Itoa(i))
		r.index[r.names[i]] = int32(i)
	}
	// Partition p's replicas on nodes p, p+1, ...: as many primaries and
	// replicas on every node.
	for p := range cfg.Partitions {
		var rs []string
		for j := range cfg.Degree {
			rs = append(rs, r.names[(p+j)%cfg.Nodes])
		}
		r.replicas = append(r.replicas, rs)
	}
	for i := range cfg.Clients {
		pol, err := balance.New(cfg.Policy, eng.Rand(streamPolicy+uint64(i)))
		if err != nil {
			return Result{}, fmt.Errorf("repsim: %w", err)
		}
		r.policies = append(r.policies, pol)
	}
	// The arrival trace: Poisson, partitions by Zipf weight, the first
	// partitions the most popular (their primaries on distinct nodes).
	arr := eng.Rand(streamArrivals)
	cum := cumulative(ZipfWeights(cfg.Partitions, cfg.Imbalance))
	for t := time.Duration(0); ; {
		t += time.Duration(arr.ExpFloat64() / cfg.Rate * float64(time.Second))
		if t >= r.end {
			break
		}
		p, _ := slices.BinarySearch(cum, arr.Float64()*cum[len(cum)-1])
		r.reqs = append(r.reqs, request{arrive: t, client: int32(arr.IntN(cfg.Clients)), part: int32(min(p, cfg.Partitions-1)),
			write: arr.Float64() < cfg.WriteFraction, node: -1})
		eng.At(t, event{kind: evArrive, req: int32(len(r.reqs) - 1)})
	}
	r.open = len(r.reqs)
	for r.open > 0 {
		ev, ok := eng.Step()
		if !ok {
			break
		}
		r.step(ev)
	}
	return r.res, nil
}

func cumulative(w []float64) []float64 {
	out := make([]float64, len(w))
	s := 0.0
	for i, x := range w {
		s += x
		out[i] = s
	}
	return out
}

// ZipfWeights are n partitions' weights under a Zipf distribution whose
// first partition draws the share f of the requests (§5.4.2's imbalance
// factor): uniform at f ≤ 1/n, all on the first at f = 1.
func ZipfWeights(n int, f float64) []float64 {
	w := make([]float64, n)
	switch {
	case f >= 1:
		w[0] = 1
		return w
	case f <= 1/float64(n):
		for i := range w {
			w[i] = 1
		}
		return w
	}
	first := func(s float64) float64 {
		var h float64
		for i := range n {
			h += math.Pow(float64(i+1), -s)
		}
		return 1 / h
	}
	lo, hi := 0.0, 64.0
	for range 100 {
		if mid := (lo + hi) / 2; first(mid) < f {
			lo = mid
		} else {
			hi = mid
		}
	}
	for i := range w {
		w[i] = math.Pow(float64(i+1), -lo)
	}
	return w
}

func (r *run) exp(mean time.Duration) time.Duration {
	return time.Duration(r.rng.ExpFloat64() * float64(mean))
}

func (r *run) step(e event) {
	switch e.kind {
	case evArrive:
		r.arrive(e.req)
	case evPollAt:
		r.eng.After(r.cfg.PollDelay, event{kind: evPollBack, node: e.node, req: e.req, load: int32(len(r.nodes[e.node].fifo))})
	case evPollBack:
		q := &r.reqs[e.req]
		l := balance.Load{Replica: r.names[e.node], Queue: int(e.load), RTT: r.eng.Now() - q.arrive}
		if q.decided {
			r.policies[q.client].Report(r.eng.Time(), l)
			return
		}
		q.answers = append(q.answers, l)
		if q.waiting--; q.waiting == 0 {
			r.decide(e.req)
		}
	case evPollLimit:
		if !r.reqs[e.req].decided {
			r.decide(e.req)
		}
	case evAtNode:
		svc := r.exp(r.cfg.Read)
		switch q := e.req; {
		case q < 0: // a write's run on a secondary
			svc = r.exp(r.cfg.Write) + r.cfg.Propagate
		case r.reqs[q].write:
			svc = r.exp(r.cfg.Write) + time.Duration(r.cfg.Degree-1)*r.cfg.Propagate
		}
		r.enqueue(e.node, job{req: e.req, service: svc})
	case evDone:
		n := &r.nodes[e.node]
		j := n.fifo[0]
		n.fifo = n.fifo[1:]
		if j.req >= 0 {
			q := &r.reqs[j.req]
			if q.write {
				for _, s := range r.replicas[q.part][1:] {
					r.eng.After(r.cfg.NetDelay, event{kind: evAtNode, node: r.index[s], req: -1})
				}
			}
			r.eng.After(r.cfg.NetDelay, event{kind: evAnswer, req: j.req})
		}
		r.next(e.node)
	case evAnswer:
		q := &r.reqs[e.req]
		lat := r.eng.Now() - q.arrive
		r.policies[q.client].Done(r.eng.Time(), r.names[q.node], lat)
		r.finish(e.req, lat <= r.cfg.Deadline)
	}
}

func (r *run) finish(id int32, onTime bool) {
	r.open--
	if r.reqs[id].arrive < r.cfg.Warmup {
		return
	}
	r.res.Measured++
	if onTime {
		r.res.OnTime++
	}
	if r.reqs[id].arrive >= r.end-r.cfg.Duration/5 {
		r.res.TailMeasured++
		if onTime {
			r.res.TailOnTime++
		}
	}
}

// arrive: a write goes to the primary; a read to the replica the
// client's policy picks, after the polls its plan asks for.
func (r *run) arrive(id int32) {
	q := &r.reqs[id]
	rs := r.replicas[q.part]
	if q.write || len(rs) == 1 {
		r.send(id, r.index[rs[0]])
		return
	}
	plan := r.policies[q.client].Plan(r.eng.Time(), rs)
	if len(plan.Poll) == 0 {
		r.decide(id)
		return
	}
	q.waiting = len(plan.Poll)
	for _, name := range plan.Poll {
		r.eng.After(r.cfg.PollDelay, event{kind: evPollAt, node: r.index[name], req: id})
	}
	r.eng.After(plan.Wait, event{kind: evPollLimit, req: id})
}

func (r *run) decide(id int32) {
	q := &r.reqs[id]
	p := r.policies[q.client]
	name := p.Choose(r.eng.Time(), r.replicas[q.part], q.answers)
	q.decided, q.answers = true, nil
	r.send(id, r.index[name])
}

func (r *run) send(id, n int32) {
	q := &r.reqs[id]
	q.node, q.decided = n, true
	r.policies[q.client].Sent(r.eng.Time(), r.names[n])
	r.eng.After(r.cfg.NetDelay, event{kind: evAtNode, node: n, req: id})
}

func (r *run) enqueue(n int32, j job) {
	nd := &r.nodes[n]
	nd.fifo = append(nd.fifo, j)
	if len(nd.fifo) == 1 {
		r.start(n)
	}
}

// next starts the node's next job, if any.
func (r *run) next(n int32) {
	if len(r.nodes[n].fifo) > 0 {
		r.start(n)
	}
}

// start serves the head job, first dropping client requests whose
// deadline passed while they queued (the dispatcher's rule).
func (r *run) start(n int32) {
	nd := &r.nodes[n]
	for len(nd.fifo) > 0 {
		j := nd.fifo[0]
		if j.req >= 0 && r.eng.Now()-r.reqs[j.req].arrive > r.cfg.Deadline {
			nd.fifo = nd.fifo[1:]
			r.policies[r.reqs[j.req].client].Done(r.eng.Time(), r.names[n], r.cfg.Deadline)
			r.finish(j.req, false)
			continue
		}
		r.eng.After(j.service, event{kind: evDone, node: n})
		return
	}
}
