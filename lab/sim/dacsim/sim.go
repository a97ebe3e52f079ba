package dac

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// SimConfig describes one simulated run of the MICRO service (§5.1 IV):
// Poisson arrivals, every call aggregates over all nodes (one partition
// each), each node has processors serving two non-preemptive FIFO queues,
// reductions before local work, with exponential service times.
type SimConfig struct {
	Nodes int
	// Procs is the number of processors of a node; the first FastNodes
	// nodes have FastProcs instead (the heterogeneous setting).
	Procs, FastNodes, FastProcs int
	// Local and Reduce are the means of the exponential operator costs.
	Local, Reduce time.Duration
	// Net is the one-way message delay.
	Net time.Duration
	// Rate is the arrival rate in calls per second.
	Rate float64
	// Calls arriving in [Warmup, Duration) are measured.
	Warmup, Duration time.Duration
	Scheme           Scheme
	// Deadline is T and Quality ρ of every call.
	Deadline time.Duration
	Quality  float64
	// Uniform selects uniform instead of staged timeouts.
	Uniform bool
	// Slack is δ of the staged timeouts, and how long past T the caller
	// waits for the root.
	Slack time.Duration
	// StageReduce is a of the staged timeouts and every node's grace
	// period: the reduction time budgeted per rank. Reduction times are
	// exponential, so a budget of the mean would often cut off a subtree
	// whose last reduction ran long; the default is four means (p98).
	StageReduce time.Duration
	// Unresponsive nodes (the last ones) accept work but never run it;
	// their load index reads as Deadline, as a timed-out poll would.
	Unresponsive int
	Seed         uint64
}

// DefaultSimConfig is the paper's MICRO setting on 24 dual-processor nodes.
func DefaultSimConfig() SimConfig {
	return SimConfig{
		Nodes: 24, Procs: 2, FastProcs: 4,
		Local: 25 * time.Millisecond, Reduce: 5 * time.Millisecond,
		Net:  170 * time.Microsecond,
		Rate: 30, Warmup: 5 * time.Second, Duration: 35 * time.Second,
		Scheme: LAT, Deadline: 2 * time.Second, Quality: 1,
		Slack: 2 * time.Millisecond, StageReduce: 20 * time.Millisecond, Seed: 1,
	}
}

// Validate reports the first invalid field.
func (c SimConfig) Validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("dac: SimConfig.Nodes %d < 1", c.Nodes)
	case c.Procs < 1:
		return fmt.Errorf("dac: SimConfig.Procs %d < 1", c.Procs)
	case c.FastNodes < 0 || c.FastNodes > c.Nodes:
		return fmt.Errorf("dac: SimConfig.FastNodes %d not in [0, Nodes]", c.FastNodes)
	case c.FastNodes > 0 && c.FastProcs < 1:
		return fmt.Errorf("dac: SimConfig.FastProcs %d < 1", c.FastProcs)
	case c.Local <= 0 || c.Reduce <= 0:
		return fmt.Errorf("dac: SimConfig.Local %v and Reduce %v must be positive", c.Local, c.Reduce)
	case c.Net < 0 || c.Slack < 0 || c.StageReduce < 0:
		return fmt.Errorf("dac: SimConfig.Net %v, Slack %v and StageReduce %v must not be negative", c.Net, c.Slack, c.StageReduce)
	case !(c.Rate > 0):
		return fmt.Errorf("dac: SimConfig.Rate %v must be positive", c.Rate)
	case c.Warmup < 0 || c.Duration <= c.Warmup:
		return fmt.Errorf("dac: SimConfig.Duration %v must exceed Warmup %v", c.Duration, c.Warmup)
	case c.Deadline <= 0:
		return fmt.Errorf("dac: SimConfig.Deadline %v must be positive", c.Deadline)
	case !(c.Quality > 0 && c.Quality <= 1):
		return fmt.Errorf("dac: SimConfig.Quality %v not in (0, 1]", c.Quality)
	case c.Unresponsive < 0 || c.Unresponsive >= c.Nodes:
		return fmt.Errorf("dac: SimConfig.Unresponsive %d not in [0, Nodes)", c.Unresponsive)
	case c.Scheme < 0 || int(c.Scheme) >= len(schemeNames):
		return fmt.Errorf("dac: SimConfig.Scheme: %w %d", ErrScheme, int(c.Scheme))
	}
	return nil
}

// IdealThroughput is the footnote-5 bound nk/(ns + (n−1)r) for the
// configuration, counting every processor.
func (c SimConfig) IdealThroughput() float64 {
	procs := (c.Nodes-c.FastNodes)*c.Procs + c.FastNodes*c.FastProcs
	work := float64(c.Nodes)*c.Local.Seconds() + float64(c.Nodes-1)*c.Reduce.Seconds()
	return float64(procs) / work
}

// SimResult summarises the measured calls of a run.
type SimResult struct {
	Calls, Succeeded int
	// Throughput is succeeded calls per second; Mean and P99 are over the
	// succeeded calls (the paper's metric).
	Throughput float64
	Mean, P99  time.Duration
	// Coverage is the mean fraction of partitions in a call's result, and
	// MinLost/MaxLost the fewest and most partitions a call lost.
	Coverage         float64
	MinLost, MaxLost int
	// ExactlyLost[j] counts the calls that lost exactly j partitions.
	ExactlyLost []int
}

// Simulate runs the configuration to completion. It drives the same tree
// builders, deadline functions and Machine as the node.
func Simulate(c SimConfig) (SimResult, error) {
	if err := c.Validate(); err != nil {
		return SimResult{}, err
	}
	s := &sim{cfg: c, rng: rand.New(rand.NewPCG(c.Seed, 0x44ac))}
	for i := range c.Nodes + 1 { // the last node is the caller
		procs := c.Procs
		if i < c.FastNodes {
			procs = c.FastProcs
		}
		s.nodes = append(s.nodes, &simNode{procs: procs, dead: i >= c.Nodes-c.Unresponsive && i < c.Nodes})
	}
	s.caller = s.nodes[c.Nodes]
	for at := time.Duration(0); ; {
		at += time.Duration(s.rng.ExpFloat64() / c.Rate * float64(time.Second))
		if at >= c.Duration {
			break
		}
		s.loop.at(at, s.arrive)
	}
	s.loop.run()
	if s.err != nil {
		return SimResult{}, s.err
	}
	return s.summary(), nil
}

type sim struct {
	cfg    SimConfig
	rng    *rand.Rand
	loop   eventLoop
	nodes  []*simNode
	caller *simNode
	calls  []*simCall
	err    error
}

type simNode struct {
	procs, busy   int
	dead          bool
	reduce, local []simTask
	// pending is the expected work of the calls queued here: the load index.
	pending time.Duration
}

type simTask struct {
	p   *simPart
	act Action
}

// simCall is one aggregation call in flight.
type simCall struct {
	arrive   time.Duration
	n        int
	parts    []*simPart
	callerM  *simPart
	done     bool
	response time.Duration
	got      int
}

// simPart is one node's Machine for one call.
type simPart struct {
	call   *simCall
	idx    int // participant index, or Caller
	node   *simNode
	parent int
	m      *Machine
	owed   time.Duration // expected work not yet done, part of node.pending
}

func (s *sim) now() time.Time { return time.Unix(0, 0).Add(s.loop.now) }

func (s *sim) arrive() {
	c := s.cfg
	call := &simCall{arrive: s.loop.now, n: c.Nodes}
	s.calls = append(s.calls, call)
	servers := make([]Server, c.Nodes)
	for i := range servers {
		nd := s.nodes[i]
		p := time.Duration(nd.procs)
		servers[i] = Server{Load: nd.pending / p, Local: c.Local / p, Reduce: c.Reduce / p}
		if nd.dead {
			servers[i].Load = c.Deadline
		}
	}
	tr, err := Build(c.Scheme, servers, s.rng)
	if err != nil {
		s.fail(err)
		return
	}
	end := s.now().Add(c.Deadline)
	var dl []time.Time
	if c.Uniform {
		dl = UniformDeadlines(tr, end)
	} else {
		dl = StagedDeadlines(tr, end, c.StageReduce, c.Slack)
	}
	for i := range c.Nodes {
		p := &simPart{call: call, idx: i, node: s.nodes[i], parent: tr.Parent[i],
			owed: RequestLoad(c.Local, c.Reduce, tr.Reductions(i))}
		p.node.pending += p.owed
		p.m = NewMachine(MachineConfig{Partition: i, Local: true, Children: tr.Children[i], Deadline: dl[i], Grace: c.StageReduce})
		call.parts = append(call.parts, p)
	}
	call.callerM = &simPart{call: call, idx: Caller, node: s.caller,
		m: NewMachine(MachineConfig{Local: false, Children: tr.CallerChildren, Deadline: end.Add(c.Slack), Grace: c.StageReduce})}
	s.drive(call.callerM)
	// The caller multicasts the tree with the request. An unresponsive
	// node never acts on it, not even on its timer.
	s.loop.after(c.Net, func() {
		for _, p := range call.parts {
			if !p.node.dead {
				s.drive(p)
			}
		}
	})
}

func (s *sim) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *sim) step(p *simPart, ev Event) {
	if p.node.dead {
		return
	}
	if err := p.m.Step(ev); err != nil {
		s.fail(err)
		return
	}
	s.drive(p)
}

// drive carries out the machine's actions.
func (s *sim) drive(p *simPart) {
	for _, a := range p.m.Ready() {
		switch a.Kind {
		case RunLocal:
			p.node.local = append(p.node.local, simTask{p, a})
			s.serve(p.node)
		case RunReduce:
			p.node.reduce = append(p.node.reduce, simTask{p, a})
			s.serve(p.node)
		case SetTimer:
			s.loop.at(a.At.Sub(time.Unix(0, 0)), func() { s.step(p, Event{Kind: Timeout}) })
		case Send:
			s.sent(p, a.Partial)
		}
	}
}

func (s *sim) sent(p *simPart, out Partial) {
	call := p.call
	if p.idx == Caller {
		call.done, call.response, call.got = true, s.loop.now-call.arrive, len(out.Partitions)
		return
	}
	s.charge(p, p.owed)
	to := call.callerM
	if p.parent != Caller {
		to = call.parts[p.parent]
	}
	s.loop.after(s.cfg.Net, func() { s.step(to, Event{Kind: ChildDone, From: p.idx, Partial: out}) })
}

// charge removes expected work from the node's load index.
func (s *sim) charge(p *simPart, d time.Duration) {
	d = min(d, p.owed)
	p.owed -= d
	p.node.pending -= d
}

// serve starts queued tasks on idle processors, reductions first; work
// whose result the machine would drop is skipped.
func (s *sim) serve(nd *simNode) {
	for !nd.dead && nd.busy < nd.procs {
		var t simTask
		switch {
		case len(nd.reduce) > 0:
			t, nd.reduce = nd.reduce[0], nd.reduce[1:]
			if t.p.m.Done() {
				continue
			}
		case len(nd.local) > 0:
			t, nd.local = nd.local[0], nd.local[1:]
			if t.p.m.Closed() {
				continue
			}
		default:
			return
		}
		mean, ev := s.cfg.Local, Event{Kind: LocalDone}
		if t.act.Kind == RunReduce {
			mean, ev = s.cfg.Reduce, Event{Kind: ReduceDone, Seq: t.act.Seq}
		}
		nd.busy++
		s.loop.after(time.Duration(s.rng.ExpFloat64()*float64(mean)), func() {
			nd.busy--
			s.charge(t.p, mean)
			s.step(t.p, ev)
			s.serve(nd)
		})
	}
}

func (s *sim) summary() SimResult {
	c := s.cfg
	res := SimResult{MinLost: c.Nodes, ExactlyLost: make([]int, c.Nodes+1)}
	var rts []time.Duration
	var sum time.Duration
	var cov float64
	need := Request{Partitions: make([]int, c.Nodes), Quality: c.Quality}.Needed()
	for _, call := range s.calls {
		if call.arrive < c.Warmup {
			continue
		}
		res.Calls++
		lost := c.Nodes - call.got
		res.MinLost, res.MaxLost = min(res.MinLost, lost), max(res.MaxLost, lost)
		res.ExactlyLost[lost]++
		cov += float64(call.got) / float64(c.Nodes)
		if call.done && call.got >= need {
			res.Succeeded++
			rts = append(rts, call.response)
			sum += call.response
		}
	}
	if res.Calls > 0 {
		res.Coverage = cov / float64(res.Calls)
	}
	res.Throughput = float64(res.Succeeded) / (c.Duration - c.Warmup).Seconds()
	if len(rts) > 0 {
		slices.Sort(rts)
		res.Mean = sum / time.Duration(len(rts))
		res.P99 = rts[min(len(rts)-1, len(rts)*99/100)]
	}
	return res
}

// eventLoop is a discrete-event clock: callbacks run in time order, ties in
// scheduling order.
type eventLoop struct {
	now time.Duration
	seq uint64
	q   eventHeap
}

type simEvent struct {
	at  time.Duration
	seq uint64
	fn  func()
}

func (l *eventLoop) at(t time.Duration, fn func()) {
	l.seq++
	heap.Push(&l.q, simEvent{max(t, l.now), l.seq, fn})
}

func (l *eventLoop) after(d time.Duration, fn func()) { l.at(l.now+d, fn) }

func (l *eventLoop) run() {
	for len(l.q) > 0 {
		e := heap.Pop(&l.q).(simEvent)
		l.now = e.at
		e.fn()
	}
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
