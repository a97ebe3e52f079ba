package aggregation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Directory is the yellow pages as an aggregation reads them
// (membership.Gossip).
type Directory interface {
	Replicas(service string, partition int32) membership.Lookup
	// Exclude hides a node a call found unreachable until it announces
	// itself again.
	Exclude(node string)
}

// Poller asks nodes for their load (transport.Poller).
type Poller interface {
	Poll(ctx context.Context, targets []transport.PollTarget, service string, partition int32, class string, wait time.Duration) []transport.PollAnswer
}

// Dialer returns the RPC client of node at addr (transport.Conns); with
// mutual TLS the connection admits only a server whose certificate names
// node.
type Dialer interface {
	ClientFor(node, addr string) (pb.NodeClient, error)
}

// Config configures a Caller.
type Config struct {
	Directory Directory
	Poller    Poller
	Dialer    Dialer
	// PollWait bounds the wait for the nodes' poll answers (default 10 ms,
	// the balancer's discard time).
	PollWait time.Duration
	// Polls is k, how many of a call's nodes it polls afresh unless the
	// Aggregation says (default dac.DefaultPolls); the others' loads are what earlier polls said,
	// randomly corrected by their age (DAC §4.5 (2)). A call over at most
	// k nodes polls them all.
	Polls int
	// LoadHorizon is the age at which a known load says no more about a
	// node than the loads of the others do (default 1 s).
	LoadHorizon time.Duration
	// Rand places nodes in random trees and breaks ties; default seeded at
	// random.
	Rand  *rand.Rand
	Clock clock.Clock
	// Metrics, if set, records every call's outcome (NewMetrics).
	Metrics *Metrics
	// Tracer, if set, traces every call (trace.go); nil: tracing off,
	// and no span is started.
	Tracer trace.Tracer
}

// Caller runs aggregations: the client's side, and a node's forwarding of
// its children's subtrees. It learns across calls (operator costs, leaf
// latencies, the hedge budget, which nodes answer polls). Safe for
// concurrent use.
type Caller struct {
	cfg   Config
	clock clock.Clock

	mu  sync.Mutex
	rng *rand.Rand
	st  state
}

// NewCaller returns a Caller; cfg.Directory, Poller and Dialer are required.
func NewCaller(cfg Config) *Caller {
	if cfg.PollWait == 0 {
		cfg.PollWait = 10 * time.Millisecond
	}
	if cfg.Polls <= 0 {
		cfg.Polls = dac.DefaultPolls
	}
	if cfg.LoadHorizon <= 0 {
		cfg.LoadHorizon = time.Second
	}
	rng := cfg.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return &Caller{cfg: cfg, clock: clock.OrReal(cfg.Clock), rng: rng}
}

// Aggregate runs a Data Aggregation Call: every partition's Local operator
// on a replica the caller picks by polled load, reduced along a tree of the
// chosen Scheme built from those loads, each node sending what it has by
// its staged deadline. A failed replica is replaced by another. If fewer
// than ⌈ρ·n⌉ partitions contribute, Aggregate returns ErrBelowQuality
// together with a result that reports what did arrive. x selects an
// experiment's baseline; the zero value is the product's behaviour.
func (c *Caller) Aggregate(ctx context.Context, a Aggregation, x Experiment) (res *Result, err error) {
	var sp *callSpan
	if c.cfg.Tracer != nil {
		ctx, sp = c.startCall(ctx, a)
		defer func() { sp.end(res, err) }()
	}
	res, err = c.aggregate(ctx, a, x, sp)
	c.cfg.Metrics.observe(a, res, err)
	return res, err
}

func (c *Caller) aggregate(ctx context.Context, a Aggregation, x Experiment, sp *callSpan) (*Result, error) {
	l, err := c.prepare(ctx, a, x, sp)
	if err != nil {
		return nil, err
	}
	resp, err := c.child(ctx, l.start, l.base, l.top, l.parts, l.hop)
	return c.conclude(ctx, a, l, resp, err)
}

// launch is a planned aggregation, ready to send to the top of its tree.
type launch struct {
	req   dac.Request
	start time.Time
	base  *pb.AggregateRequest
	// top is the root participant, or Base's coordinator; parts are the
	// whole tree.
	top   *pb.Participant
	parts []*pb.Participant
	hop   time.Duration
}

// prepare validates a, plans its participants (polls, loads), builds the
// tree and sets the staged deadlines: everything before the first send.
func (c *Caller) prepare(ctx context.Context, a Aggregation, x Experiment, sp *callSpan) (*launch, error) {
	start := c.clock.Now()
	if err := a.Validate(); err != nil {
		return nil, err
	}
	_, meanReduce := c.st.costs(a.Service, a.Deadline)
	budget := a.ReduceBudget
	if budget == 0 {
		budget = 4 * meanReduce
	}
	hop := hopFor(a.Deadline)

	plans, polled, err := c.plan(ctx, a)
	if err != nil {
		return nil, err
	}
	servers := make([]dac.Server, len(plans))
	for i, p := range plans {
		servers[i] = p.server
	}
	c.mu.Lock()
	rng := rand.New(rand.NewPCG(c.rng.Uint64(), c.rng.Uint64()))
	c.mu.Unlock()
	tree, err := dac.Build(a.Scheme, servers, rng)
	if err != nil {
		return nil, fmt.Errorf("neptune: aggregate: %w", err)
	}
	end := start.Add(a.Deadline)
	deadlines := dac.StagedDeadlines(tree, end, budget, hop)
	if x.UniformTimeouts {
		deadlines = dac.UniformDeadlines(tree, end)
	}
	parts := make([]*pb.Participant, len(plans))
	for i, p := range plans {
		pp := &pb.Participant{Index: int32(i), Partition: int32(p.partition), Parent: int32(tree.Parent[i]), DeadlineNs: int64(deadlines[i].Sub(start))}
		for _, r := range p.replicas {
			pp.Replicas = append(pp.Replicas, &pb.ReplicaAddr{Node: r.Node, RpcAddr: r.RPCAddr})
		}
		parts[i] = pp
	}
	base := &pb.AggregateRequest{
		Service: a.Service, Local: a.Local, LocalParams: a.LocalParams, Reduce: a.Reduce, ReduceParams: a.ReduceParams,
		GraceNs: int64(budget), Hedge: a.Hedge, Class: a.Class, Blocking: x.Blocking, CallId: fmt.Sprintf("%x", rng.Uint64()),
	}
	top := parts[tree.CallerChildren[0]]
	if a.Scheme == dac.Base {
		top = &pb.Participant{Index: -1, Parent: -1, DeadlineNs: int64(a.Deadline), Replicas: coordinators(plans)}
	}
	sp.planned(base.CallId, len(parts), polled)
	return &launch{req: a.request(), start: start, base: base, top: top, parts: parts, hop: hop}, nil
}

// conclude turns the top's answer (resp, and the failure err of a top
// that gave none or only a partial one) into the call's result: ErrBelowQuality with what did arrive when too few
// partitions contributed.
func (c *Caller) conclude(ctx context.Context, a Aggregation, l *launch, resp *pb.AggregateResponse, err error) (*Result, error) {
	var p dac.Partial
	hedges := 0
	switch {
	case resp != nil:
		c.st.observe(a.Service, resp)
		p = dac.Partial{Partitions: ints(resp.Partitions), Data: resp.Data}
		hedges = int(resp.Hedges)
	case errors.Is(err, nerr.ErrUnknownMethod), errors.Is(err, nerr.ErrUnknownService), ctx.Err() != nil:
		return nil, fmt.Errorf("neptune: aggregate %s: %w", a.Service, err)
	}
	res, ferr := dac.Finish(l.req, p)
	out := &Result{Status: res.Status, Contributing: res.Contributing, Coverage: res.Coverage, Hedges: hedges}
	if d, ok := res.Data.([]byte); ok {
		out.Data = d
	}
	if ferr != nil {
		if err != nil {
			ferr = fmt.Errorf("%w (root: %w)", ferr, err)
		}
		return out, fmt.Errorf("neptune: aggregate %s: %w", a.Service, ferr)
	}
	return out, nil
}

// hopFor is the one-hop network allowance of a call with deadline T.
func hopFor(deadline time.Duration) time.Duration {
	return max(2*time.Millisecond, deadline/100)
}

// plan is the caller's view of one participant: its replicas, best first,
// and what the tree builder is told of the first.
type plan struct {
	partition int
	replicas  []membership.Replica
	server    dac.Server
}

// probe is what one poll said of a node.
type probe struct {
	answer   transport.PollAnswer
	answered bool
	// silent is how long the node has not answered a poll (0 if it
	// answered this one).
	silent time.Duration
}

// server is what the tree builder knows of the node, in time per worker
// (§4.2: a node with twice the workers has half the cost): its ledger of
// committed aggregation work (§4.5), or, from a node that keeps none, its
// queue length times s + a. An unanswered poll reads as far more load than
// any answer, the more the longer the node has been silent, so the node
// becomes a leaf: when many polls are late (a busy machine), a node that
// answered the last call is the one made interior, not one that stopped.
func (p probe) server(local, reduce, deadline time.Duration) dac.Server {
	switch {
	case !p.answered:
		return dac.Server{Load: 10*deadline + min(p.silent, 10*deadline), Local: local, Reduce: reduce}
	case p.answer.Work.Capacity > 0:
		k := time.Duration(p.answer.Work.Capacity)
		return dac.Server{Load: p.answer.Work.Pending / k, Local: local / k, Reduce: reduce / k}
	}
	return dac.Server{Load: time.Duration(p.answer.Queue) * (local + reduce), Local: local, Reduce: reduce}
}

// coordinators lists every node of the service, by id: Base's fixed
// coordinator first, the others as its replacements.
func coordinators(plans []plan) []*pb.ReplicaAddr {
	seen := map[string]bool{}
	var out []*pb.ReplicaAddr
	for _, p := range plans {
		for _, r := range p.replicas {
			if !seen[r.Node] {
				seen[r.Node] = true
				out = append(out, &pb.ReplicaAddr{Node: r.Node, RpcAddr: r.RPCAddr})
			}
		}
	}
	slices.SortFunc(out, func(a, b *pb.ReplicaAddr) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// plan looks every partition up, polls k of the nodes hosting one
// (pickPolls) and estimates the others' loads from what earlier polls said
// (estimate); replicas are ranked by load (silent nodes last, ties at
// random). A partition with no live replica is left out: it cannot
// contribute. polled is how many nodes it polled.
func (c *Caller) plan(ctx context.Context, a Aggregation) (plans []plan, polled int, err error) {
	nodes := map[string]membership.Replica{}
	nodePart := map[string]int32{}
	for _, part := range a.Partitions {
		look := c.cfg.Directory.Replicas(a.Service, int32(part))
		switch {
		case len(look.Replicas) > 0:
		case look.PartitionKnown:
			continue // no live replica: the partition cannot contribute
		case look.ServiceKnown:
			return nil, 0, fmt.Errorf("%w %d of service %q", nerr.ErrUnknownPartition, part, a.Service)
		default:
			return nil, 0, fmt.Errorf("%w %q", nerr.ErrUnknownService, a.Service)
		}
		plans = append(plans, plan{partition: part, replicas: look.Replicas})
		for _, r := range look.Replicas {
			nodes[r.Node] = r
			nodePart[r.Node] = int32(part)
		}
	}
	if len(plans) == 0 {
		return nil, 0, fmt.Errorf("%w for any partition of %s", nerr.ErrNoReplica, a.Service)
	}
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	k := c.cfg.Polls
	if a.Polls > 0 {
		k = a.Polls
	}
	c.mu.Lock()
	polls := pickPolls(c.st.views(a.Service, ids, c.clock.Now()), k, c.rng)
	c.mu.Unlock()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var answers []transport.PollAnswer
	for _, id := range polls {
		wg.Go(func() {
			r := nodes[id]
			got := c.cfg.Poller.Poll(ctx, []transport.PollTarget{{Replica: id, Addr: r.PollAddr}}, a.Service, nodePart[id], a.Class, c.cfg.PollWait)
			mu.Lock()
			answers = append(answers, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	byNode := map[string]transport.PollAnswer{}
	for _, ans := range answers {
		byNode[ans.Replica] = ans
	}
	meanLocal, meanReduce := c.st.costs(a.Service, a.Deadline)
	now := c.clock.Now()
	c.st.polled(now, polls, byNode)
	c.st.learn(now, a.Service, byNode)
	views := c.st.views(a.Service, ids, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	servers := estimate(now, views, c.cfg.LoadHorizon, meanLocal, meanReduce, a.Deadline, c.rng)
	for i := range plans {
		rs := slices.Clone(plans[i].replicas)
		c.rng.Shuffle(len(rs), func(x, y int) { rs[x], rs[y] = rs[y], rs[x] })
		slices.SortStableFunc(rs, func(x, y membership.Replica) int { return cmp.Compare(servers[x.Node].Load, servers[y.Node].Load) })
		plans[i].replicas, plans[i].server = rs, servers[rs[0].Node]
	}
	return plans, len(polls), nil
}

// state is what a caller learns across aggregations: mean operator costs
// per service (for tree building and staged timeouts), recent leaf
// latencies (for hedging) and the hedge budget. The zero value is ready.
type state struct {
	mu     sync.Mutex
	local  map[string]time.Duration // EWMA of mean local cost
	reduce map[string]time.Duration // EWMA of mean reduction cost
	leaf   map[string]*latencyRing
	tokens int // leaf calls not yet spent on hedges
	// heard is when each node last answered a poll in time, or was first
	// polled if it never answered; missed holds the nodes whose last poll
	// went unanswered.
	heard  map[string]time.Time
	missed map[string]bool
	// loads is, per service and node, the last poll answer and when it
	// came: what a call that does not poll the node knows of its load.
	loads map[string]map[string]known
}

// polled records which of the polled nodes answered and returns, for each
// that did not, how long it has been silent (since its last answer, or
// since it was first polled).
func (s *state) polled(now time.Time, nodes []string, answers map[string]transport.PollAnswer) map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.heard == nil {
		s.heard, s.missed = map[string]time.Time{}, map[string]bool{}
	}
	silent := map[string]time.Duration{}
	for _, id := range nodes {
		at, seen := s.heard[id]
		_, ok := answers[id]
		if ok || !seen {
			s.heard[id], at = now, now
		}
		s.missed[id] = !ok
		if !ok {
			silent[id] = now.Sub(at)
		}
	}
	return silent
}

// learn records the answers as the service's latest known loads.
func (s *state) learn(now time.Time, service string, answers map[string]transport.PollAnswer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loads == nil {
		s.loads = map[string]map[string]known{}
	}
	book := s.loads[service]
	if book == nil {
		book = map[string]known{}
		s.loads[service] = book
	}
	for id, ans := range answers {
		book[id] = known{answer: ans, at: now}
	}
}

// views returns what the caller knows of each node's load for service.
func (s *state) views(service string, ids []string, now time.Time) []view {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]view, len(ids))
	for i, id := range ids {
		out[i] = view{node: id, known: s.loads[service][id]}
		if s.missed[id] {
			out[i].missed, out[i].silent = true, now.Sub(s.heard[id])
		}
	}
	return out
}

// costWeight is the EWMA weight of one call's measured means.
const costWeight = 0.2

// costs returns the mean local and reduction costs seen for service, or
// T/20 and T/160 before any (so the default staged budget is T/40).
func (s *state) costs(service string, deadline time.Duration) (local, reduce time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	local, reduce = s.local[service], s.reduce[service]
	if local == 0 {
		local = deadline / 20
	}
	if reduce == 0 {
		reduce = deadline / 160
	}
	return local, reduce
}

func (s *state) observe(service string, r *pb.AggregateResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.local == nil {
		s.local, s.reduce = map[string]time.Duration{}, map[string]time.Duration{}
	}
	ewma := func(m map[string]time.Duration, total int64, n int32) {
		if n == 0 {
			return
		}
		mean := time.Duration(total / int64(n))
		if old, ok := m[service]; ok {
			mean = time.Duration((1-costWeight)*float64(old) + costWeight*float64(mean))
		}
		m[service] = mean
	}
	ewma(s.local, r.LocalNs, r.Locals)
	ewma(s.reduce, r.ReduceNs, r.Reductions)
}
