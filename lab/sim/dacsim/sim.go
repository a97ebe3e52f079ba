// Package dacsim simulates Data Aggregation Calls (the DAC paper, PPoPP'03)
// on the lab's discrete-event engine: the MICRO service on n nodes, every
// call aggregating over all of them through the real tree builders,
// deadline functions and dac.Machine the nodes run (`neptune sim dac`).
package dacsim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/lab/report"
	"github.com/neptune-cluster/neptune/lab/sim"
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
	Scheme           dac.Scheme
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
	// Loads is where the caller learns the loads LAT is built from.
	Loads LoadSource
	// Announce is how often every node announces its load (LoadsStale),
	// each at its own phase; Polls is k, how many nodes the caller polls
	// afresh per call (LoadsStale; dac.PickPolls chooses them).
	Announce time.Duration
	Polls    int
	// PollsOnly (LoadsStale): nodes announce nothing, so the caller knows
	// only what its own polls said, as the product's caller does;
	// Announce is then only the horizon of dac.Estimate.
	PollsOnly bool
	// View (LoadsStale) is how each caller brings reports up to date;
	// Callers is how many independent callers share the calls (round
	// robin; 0: one), each with its own view but for ViewShared:
	// announcements reach all, a caller's polls only itself.
	View    View
	Callers int
	// Piggyback (a caller's own view): every result a node sends carries
	// its load index then, which the caller learns when the call ends; no
	// extra message.
	Piggyback bool
	// Candidates, if in (0, 1), is the fraction of nodes, drawn at random
	// per call, that may take reductions; the others read as loaded by
	// Deadline, so calls built from the same stale loads spread their
	// interior nodes instead of piling them on the same light ones.
	Candidates float64
	// OnLoads, if set, is shown every node's load index every SampleEvery
	// from Warmup on (the loads section's load memory).
	OnLoads     func(loads []time.Duration)
	SampleEvery time.Duration
	Seed        uint64
}

// LoadSource is how a simulated caller knows the nodes' loads.
type LoadSource int

const (
	// LoadsExact: the caller reads every node's load index as it is, at no
	// cost (the oracle the paper's figures assume).
	LoadsExact LoadSource = iota
	// LoadsPollAll: the caller polls every node per call, as the product
	// did before issue 30: exact loads, one round trip before the tree
	// goes out, 2n control messages (poll and answer) per call.
	LoadsPollAll
	// LoadsStale: loads as last announced (every Announce) with the
	// random correction of dac.Estimate, corrected by Polls fresh polls:
	// one round trip if Polls > 0, 2·Polls control messages per call.
	LoadsStale
)

func (l LoadSource) String() string {
	switch l {
	case LoadsExact:
		return "exact"
	case LoadsPollAll:
		return "poll-all"
	case LoadsStale:
		return "stale"
	}
	return fmt.Sprintf("LoadSource(%d)", int(l))
}

// DefaultSimConfig is the paper's MICRO setting on 24 dual-processor nodes.
func DefaultSimConfig() SimConfig {
	return SimConfig{
		Nodes: 24, Procs: 2, FastProcs: 4,
		Local: 25 * time.Millisecond, Reduce: 5 * time.Millisecond,
		Net:  170 * time.Microsecond,
		Rate: 30, Warmup: 5 * time.Second, Duration: 35 * time.Second,
		Scheme: dac.LAT, Deadline: 2 * time.Second, Quality: 1,
		Slack: 2 * time.Millisecond, StageReduce: 20 * time.Millisecond, Seed: 1,
	}
}

// Validate reports the first invalid field.
func (c SimConfig) Validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("dacsim: SimConfig.Nodes %d < 1", c.Nodes)
	case c.Procs < 1:
		return fmt.Errorf("dacsim: SimConfig.Procs %d < 1", c.Procs)
	case c.FastNodes < 0 || c.FastNodes > c.Nodes:
		return fmt.Errorf("dacsim: SimConfig.FastNodes %d not in [0, Nodes]", c.FastNodes)
	case c.FastNodes > 0 && c.FastProcs < 1:
		return fmt.Errorf("dacsim: SimConfig.FastProcs %d < 1", c.FastProcs)
	case c.Local <= 0 || c.Reduce <= 0:
		return fmt.Errorf("dacsim: SimConfig.Local %v and Reduce %v must be positive", c.Local, c.Reduce)
	case c.Net < 0 || c.Slack < 0 || c.StageReduce < 0:
		return fmt.Errorf("dacsim: SimConfig.Net %v, Slack %v and StageReduce %v must not be negative", c.Net, c.Slack, c.StageReduce)
	case !(c.Rate > 0):
		return fmt.Errorf("dacsim: SimConfig.Rate %v must be positive", c.Rate)
	case c.Warmup < 0 || c.Duration <= c.Warmup:
		return fmt.Errorf("dacsim: SimConfig.Duration %v must exceed Warmup %v", c.Duration, c.Warmup)
	case c.Deadline <= 0:
		return fmt.Errorf("dacsim: SimConfig.Deadline %v must be positive", c.Deadline)
	case !(c.Quality > 0 && c.Quality <= 1):
		return fmt.Errorf("dacsim: SimConfig.Quality %v not in (0, 1]", c.Quality)
	case c.Unresponsive < 0 || c.Unresponsive >= c.Nodes:
		return fmt.Errorf("dacsim: SimConfig.Unresponsive %d not in [0, Nodes)", c.Unresponsive)
	case c.Loads < LoadsExact || c.Loads > LoadsStale:
		return fmt.Errorf("dacsim: SimConfig.Loads %d is not a load source", int(c.Loads))
	case c.Callers < 0 || c.View < ViewShared || c.View > ViewSince || c.View != ViewShared && c.Loads != LoadsStale:
		return fmt.Errorf("dacsim: SimConfig.Callers %d must not be negative, and View %v be a view, other than shared only with stale loads", c.Callers, c.View)
	case c.Piggyback && c.View == ViewShared || !(c.Candidates >= 0 && c.Candidates <= 1):
		return fmt.Errorf("dacsim: SimConfig.Piggyback needs a caller's own view, and Candidates %v must be in [0, 1]", c.Candidates)
	case c.Loads == LoadsStale && (c.Announce <= 0 || c.Polls < 0):
		return fmt.Errorf("dacsim: SimConfig.Announce %v must be positive and Polls %d not negative with stale loads", c.Announce, c.Polls)
	case !validScheme(c.Scheme):
		return fmt.Errorf("dacsim: SimConfig.Scheme: %w %d", dac.ErrScheme, int(c.Scheme))
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
	// Control is the mean number of control messages (load polls and
	// their answers) a measured call sent; Announcements the mean number
	// of load announcements per call (every node's, every Announce,
	// however many calls run).
	Control, Announcements float64
}

// Simulate runs the configuration to completion. It drives the same tree
// builders, deadline functions and dac.Machine as the node.
func Simulate(c SimConfig) (SimResult, error) {
	if err := c.Validate(); err != nil {
		return SimResult{}, err
	}
	eng := sim.New[func()](time.Unix(0, 0), c.Seed)
	s := &run{cfg: c, eng: eng, rng: eng.Rand(streamDAC)}
	for i := range c.Nodes + 1 { // the last node is the caller
		procs := c.Procs
		if i < c.FastNodes {
			procs = c.FastProcs
		}
		s.nodes = append(s.nodes, &simNode{procs: procs, dead: i >= c.Nodes-c.Unresponsive && i < c.Nodes})
	}
	s.caller = s.nodes[c.Nodes]
	if c.View != ViewShared {
		for range max(c.Callers, 1) {
			s.views = append(s.views, newView(c.View, c.Nodes))
		}
	}
	if c.Loads == LoadsStale && !c.PollsOnly {
		ann := eng.Rand(streamAnnounce)
		for i, nd := range s.nodes[:c.Nodes] {
			if !nd.dead {
				s.announce(i, nd, time.Duration(ann.Int64N(int64(c.Announce))))
			}
		}
	}
	for at := time.Duration(0); ; {
		at += time.Duration(s.rng.ExpFloat64() / c.Rate * float64(time.Second))
		if at >= c.Duration {
			break
		}
		eng.At(at, s.arrive)
	}
	if c.OnLoads != nil && c.SampleEvery > 0 {
		for at := c.Warmup; at < c.Duration; at += c.SampleEvery {
			eng.At(at, func() {
				loads := make([]time.Duration, c.Nodes)
				for i, nd := range s.nodes[:c.Nodes] {
					loads[i] = nd.pending / time.Duration(nd.procs)
				}
				c.OnLoads(loads)
			})
		}
	}
	eng.Run(func(f func()) { f() })
	if s.err != nil {
		return SimResult{}, s.err
	}
	return s.summary(), nil
}

// streamDAC is the random stream of a run's arrivals, trees and service
// times.
const streamDAC = 0x44ac

// streamAnnounce is the random stream of the nodes' announcement phases.
const streamAnnounce = 0x44ad

// announce makes nd announce its load at virtual time at and every
// Announce after.
func (s *run) announce(i int, nd *simNode, at time.Duration) {
	s.eng.At(at, func() {
		nd.announced = dac.Known{Load: nd.pending / time.Duration(nd.procs), At: s.eng.Time()}
		for _, v := range s.views {
			v.report(i, nd.announced.Load, nd.announced.At)
		}
		s.announcements++
		if next := s.eng.Now() + s.cfg.Announce; next < s.cfg.Duration {
			s.announce(i, nd, next)
		}
	})
}

// validScheme reports whether s is one of dac's tree schemes.
func validScheme(s dac.Scheme) bool {
	_, err := dac.ParseScheme(s.String())
	return err == nil
}

type run struct {
	cfg    SimConfig
	rng    *rand.Rand
	eng    *sim.Engine[func()]
	nodes  []*simNode
	caller *simNode
	calls  []*simCall
	// views are the callers' own views (View other than shared).
	views []loadView
	err   error
	// announcements counts load announcements sent in the measured window.
	announcements int
}

type simNode struct {
	procs, busy   int
	dead          bool
	reduce, local []simTask
	// pending is the expected work of the calls queued here: the load index.
	pending time.Duration
	// announced is the load this node last announced (LoadsStale).
	announced dac.Known
}

type simTask struct {
	p   *simPart
	act dac.Action
}

// simCall is one aggregation call in flight.
type simCall struct {
	arrive  time.Duration
	n       int
	control int // control messages sent for the call
	parts   []*simPart
	callerM *simPart
	// caller is which of Callers made the call; committed the work its
	// tree gave each node, in the caller's view until the call ends.
	caller    int
	committed []time.Duration
	built     time.Time
	// heard is the load each node's result carried (Piggyback).
	heard    []dac.Known
	done     bool
	response time.Duration
	got      int
}

// simPart is one node's dac.Machine for one call.
type simPart struct {
	call   *simCall
	idx    int // participant index, or dac.Caller
	node   *simNode
	parent int
	m      *dac.Machine
	owed   time.Duration // expected work not yet done, part of node.pending
}

// arrive starts a call: at once with exact loads, after a round of polls
// otherwise.
func (s *run) arrive() {
	c := s.cfg
	call := &simCall{arrive: s.eng.Now(), n: c.Nodes, caller: len(s.calls) % max(c.Callers, 1)}
	s.calls = append(s.calls, call)
	var polled []int
	switch c.Loads {
	case LoadsExact:
		s.build(call, nil)
		return
	case LoadsPollAll:
		polled = make([]int, c.Nodes)
		for i := range polled {
			polled[i] = i
		}
	case LoadsStale:
		known := make([]dac.Known, c.Nodes)
		for i, nd := range s.nodes[:c.Nodes] {
			known[i] = nd.announced
		}
		if s.views != nil {
			known = s.views[call.caller].known(s.eng.Time())
		}
		polled = dac.PickPolls(known, c.Polls, s.rng)
	}
	if len(polled) == 0 {
		s.build(call, nil)
		return
	}
	call.control = 2 * len(polled)
	// A poll reaches its node after Net, which answers with its load then;
	// the answers are back after another Net.
	s.eng.After(c.Net, func() {
		fresh := map[int]time.Duration{}
		for _, i := range polled {
			if nd := s.nodes[i]; !nd.dead {
				fresh[i] = nd.pending / time.Duration(nd.procs)
			}
		}
		s.eng.After(c.Net, func() { s.build(call, fresh) })
	})
}

// loads returns the load index the caller builds the tree from for every
// node: exact, or as announced and corrected, with the polled ones fresh.
// An unresponsive node's reads as Deadline, as a timed-out poll would.
func (s *run) loads(call *simCall, fresh map[int]time.Duration) []time.Duration {
	c := s.cfg
	out := make([]time.Duration, c.Nodes)
	switch {
	case s.views != nil:
		v := s.views[call.caller]
		for i, l := range fresh {
			v.report(i, l, s.eng.Time())
		}
		out = reckoned(v.known(s.eng.Time()))
	case c.Loads == LoadsStale:
		known := make([]dac.Known, c.Nodes)
		for i, nd := range s.nodes[:c.Nodes] {
			known[i] = nd.announced
			if l, ok := fresh[i]; ok {
				nd.announced = dac.Known{Load: l, At: s.eng.Time()}
				known[i] = nd.announced
			}
		}
		out = dac.Estimate(known, s.eng.Time(), c.Announce, s.rng)
	default:
		for i, nd := range s.nodes[:c.Nodes] {
			out[i] = nd.pending / time.Duration(nd.procs)
			if l, ok := fresh[i]; ok {
				out[i] = l
			}
		}
	}
	if c.Candidates > 0 && c.Candidates < 1 {
		for i := range out {
			if s.rng.Float64() >= c.Candidates {
				out[i] += c.Deadline
			}
		}
	}
	for i, nd := range s.nodes[:c.Nodes] {
		if nd.dead {
			out[i] = c.Deadline
		}
	}
	return out
}

// build forms the call's tree from the loads it knows and sends it out.
func (s *run) build(call *simCall, fresh map[int]time.Duration) {
	c := s.cfg
	loads := s.loads(call, fresh)
	servers := make([]dac.Server, c.Nodes)
	for i := range servers {
		p := time.Duration(s.nodes[i].procs)
		servers[i] = dac.Server{Load: loads[i], Local: c.Local / p, Reduce: c.Reduce / p}
	}
	tr, err := dac.Build(c.Scheme, servers, s.rng)
	if err != nil {
		s.fail(err)
		return
	}
	call.built = s.eng.Time()
	if c.Piggyback {
		call.heard = make([]dac.Known, c.Nodes)
	}
	end := s.eng.Time().Add(c.Deadline - (s.eng.Now() - call.arrive))
	var dl []time.Time
	if c.Uniform {
		dl = dac.UniformDeadlines(tr, end)
	} else {
		dl = dac.StagedDeadlines(tr, end, c.StageReduce, c.Slack)
	}
	for i := range c.Nodes {
		p := &simPart{call: call, idx: i, node: s.nodes[i], parent: tr.Parent[i],
			owed: dac.RequestLoad(c.Local, c.Reduce, tr.Reductions(i))}
		p.node.pending += p.owed
		if s.views != nil {
			w := p.owed / time.Duration(p.node.procs)
			call.committed = append(call.committed, w)
			s.views[call.caller].commit(i, w, s.eng.Time())
		}
		p.m = dac.NewMachine(dac.MachineConfig{Partition: i, Local: true, Children: tr.Children[i], Deadline: dl[i], Grace: c.StageReduce})
		call.parts = append(call.parts, p)
	}
	call.callerM = &simPart{call: call, idx: dac.Caller, node: s.caller,
		m: dac.NewMachine(dac.MachineConfig{Local: false, Children: tr.CallerChildren, Deadline: end.Add(c.Slack), Grace: c.StageReduce})}
	s.drive(call.callerM)
	// The caller multicasts the tree with the request. An unresponsive
	// node never acts on it, not even on its timer.
	s.eng.After(c.Net, func() {
		for _, p := range call.parts {
			if !p.node.dead {
				s.drive(p)
			}
		}
	})
}

func (s *run) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *run) step(p *simPart, ev dac.Event) {
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
func (s *run) drive(p *simPart) {
	for _, a := range p.m.Ready() {
		switch a.Kind {
		case dac.RunLocal:
			p.node.local = append(p.node.local, simTask{p, a})
			s.serve(p.node)
		case dac.RunReduce:
			p.node.reduce = append(p.node.reduce, simTask{p, a})
			s.serve(p.node)
		case dac.SetTimer:
			s.eng.After(a.At.Sub(s.eng.Time()), func() { s.step(p, dac.Event{Kind: dac.Timeout}) })
		case dac.Send:
			s.sent(p, a.Partial)
		}
	}
}

func (s *run) sent(p *simPart, out dac.Partial) {
	call := p.call
	if p.idx == dac.Caller {
		call.done, call.response, call.got = true, s.eng.Now()-call.arrive, len(out.Partitions)
		for i, w := range call.committed {
			s.views[call.caller].done(i, w, call.built)
		}
		for i, kn := range call.heard {
			if kn.Seen() {
				s.views[call.caller].report(i, kn.Load, kn.At)
			}
		}
		return
	}
	s.charge(p, p.owed)
	if call.heard != nil {
		call.heard[p.idx] = dac.Known{Load: p.node.pending / time.Duration(p.node.procs), At: s.eng.Time()}
	}
	to := call.callerM
	if p.parent != dac.Caller {
		to = call.parts[p.parent]
	}
	s.eng.After(s.cfg.Net, func() { s.step(to, dac.Event{Kind: dac.ChildDone, From: p.idx, Partial: out}) })
}

// charge removes expected work from the node's load index.
func (s *run) charge(p *simPart, d time.Duration) {
	d = min(d, p.owed)
	p.owed -= d
	p.node.pending -= d
}

// serve starts queued tasks on idle processors, reductions first; work
// whose result the machine would drop is skipped.
func (s *run) serve(nd *simNode) {
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
		mean, ev := s.cfg.Local, dac.Event{Kind: dac.LocalDone}
		if t.act.Kind == dac.RunReduce {
			mean, ev = s.cfg.Reduce, dac.Event{Kind: dac.ReduceDone, Seq: t.act.Seq}
		}
		nd.busy++
		s.eng.After(time.Duration(s.rng.ExpFloat64()*float64(mean)), func() {
			nd.busy--
			s.charge(t.p, mean)
			s.step(t.p, ev)
			s.serve(nd)
		})
	}
}

func (s *run) summary() SimResult {
	c := s.cfg
	res := SimResult{MinLost: c.Nodes, ExactlyLost: make([]int, c.Nodes+1)}
	var rts []time.Duration
	var cov float64
	need := dac.Request{Partitions: make([]int, c.Nodes), Quality: c.Quality}.Needed()
	for _, call := range s.calls {
		if call.arrive < c.Warmup {
			continue
		}
		res.Calls++
		lost := c.Nodes - call.got
		res.MinLost, res.MaxLost = min(res.MinLost, lost), max(res.MaxLost, lost)
		res.ExactlyLost[lost]++
		cov += float64(call.got) / float64(c.Nodes)
		res.Control += float64(call.control)
		if call.done && call.got >= need {
			res.Succeeded++
			rts = append(rts, call.response)
		}
	}
	if res.Calls > 0 {
		res.Coverage = cov / float64(res.Calls)
		res.Control /= float64(res.Calls)
		res.Announcements = float64(s.announcements) / float64(len(s.calls))
	}
	res.Throughput = float64(res.Succeeded) / (c.Duration - c.Warmup).Seconds()
	lat := report.Summarize(rts)
	res.Mean, res.P99 = lat.Mean, lat.P99
	return res
}
