package aggregation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// ReduceClass is the pool class of aggregation reductions; ReduceFirst
// serves it before anything else.
const ReduceClass = "neptune/reduce"

// Workers runs an operator holding one of the service's worker slots
// (dispatch.Pool).
type Workers interface {
	Do(ctx context.Context, class string, run func(context.Context)) error
}

// Hosted is what a node's part of an aggregation needs of the service.
type Hosted struct {
	// Operators are the service's (nil if it declares none).
	Operators *service.Aggregator
	// Partitions are the partitions this node hosts, sorted.
	Partitions []int32
	Workers    Workers
	// Ledger is the service's load index of committed aggregation work
	// (§4.5), which the node's poll answers report.
	Ledger *dac.Ledger
}

// Services finds the services the node hosts (the node).
type Services interface {
	Aggregation(service string) (Hosted, bool)
}

// ServerConfig configures a node's side of aggregations.
type ServerConfig struct {
	// Self is the node's id, for errors.
	Self     string
	Services Services
	// Caller forwards the children's subtrees: the node's own client's,
	// so both learn from the same leaf latencies.
	Caller *Caller
	// Clock times operators and staged deadlines (default real).
	Clock clock.Clock
	// MaxDeadline bounds a request's deadline and grace (default
	// DefaultMaxDeadline); MaxParticipants its participants (default
	// DefaultMaxParticipants). See limits.go.
	MaxDeadline     time.Duration
	MaxParticipants int
	// Tracer, if set, traces this node's part of every call and the
	// operators it runs (trace.go); nil: tracing off.
	Tracer trace.Tracer
}

// Server runs a node's part of aggregations.
type Server struct {
	self     string
	services Services
	caller   *Caller
	clock    clock.Clock
	limits   limits
	tracer   trace.Tracer // nil: tracing off
}

// NewServer returns the node side of aggregations.
func NewServer(cfg ServerConfig) *Server {
	l := limits{maxDeadline: cfg.MaxDeadline, maxParticipants: cfg.MaxParticipants}
	if l.maxDeadline <= 0 {
		l.maxDeadline = DefaultMaxDeadline
	}
	if l.maxParticipants <= 0 {
		l.maxParticipants = DefaultMaxParticipants
	}
	return &Server{self: cfg.Self, services: cfg.Services, caller: cfg.Caller, clock: clock.OrReal(cfg.Clock), limits: l, tracer: cfg.Tracer}
}

// call is this node's part of one aggregation, as Serve sets it up and
// run drives it.
type call struct {
	in *pb.AggregateRequest
	// start is when the caller started the call, on this node's clock.
	start time.Time
	// exec runs an operator on the service's workers.
	exec   func(ctx context.Context, class string, run func(context.Context)) error
	local  service.LocalFunc
	reduce service.ReduceFunc
	m      *dac.Machine
	cfg    dac.MachineConfig
	// owed is this call's entry in the ledger, paid off as operators finish.
	owed     *dac.Commitment
	byParent map[int32][]*pb.Participant
	children []*pb.Participant
	// progress, at the top of a streaming aggregation, is shown each
	// larger partial in hand (nil otherwise).
	progress func(dac.Partial)
}

// event is a Machine event with the costs measured on the way.
type event struct {
	ev    dac.Event
	stats *pb.AggregateResponse // a child's subtree stats
	local time.Duration
	ran   bool // a reduction ran (its cost is in cost)
	cost  time.Duration
}

// Serve runs this node's part of an aggregation: its local operator on
// the pool, its children's subtrees by forwarding, reductions on the pool
// ahead of local work. It waits for children in this RPC's goroutine,
// which holds no worker slot.
func (s *Server) Serve(ctx context.Context, in *pb.AggregateRequest) (answer *pb.AggregateResponse, failure error) {
	return s.serve(ctx, in, nil)
}

// ServeStream is Serve at the top of a streaming aggregation
// (AggregateStream): send gets a progress frame (partitions and data)
// whenever this node's reduced result covers more partitions than before,
// then the final frame, Serve's answer with Final set. Progress frames
// are sent from a goroutine of their own, newest first: a caller slow to
// read skips intermediate ones rather than holding the tree's reductions
// back. An error from send cancels the call (the caller went away).
func (s *Server) ServeStream(ctx context.Context, in *pb.AggregateRequest, send func(*pb.AggregateResponse) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		latest *pb.AggregateResponse
		// sendErr is the sender's; read once it has stopped.
		sendErr error
	)
	wake, stop, stopped := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-wake:
			case <-stop:
				return
			}
			mu.Lock()
			f := latest
			latest = nil
			mu.Unlock()
			if f == nil {
				continue
			}
			if sendErr = send(f); sendErr != nil {
				cancel()
				return
			}
		}
	}()
	progress := func(p dac.Partial) {
		mu.Lock()
		latest = &pb.AggregateResponse{Partitions: int32s(p.Partitions), Data: bytesOf(p.Data)}
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	out, err := s.serve(ctx, in, progress)
	close(stop)
	<-stopped
	if sendErr != nil {
		return sendErr
	}
	if err != nil {
		return err
	}
	out.Final = true
	return send(out)
}

func (s *Server) serve(ctx context.Context, in *pb.AggregateRequest, progress func(dac.Partial)) (answer *pb.AggregateResponse, failure error) {
	defer func() { s.caller.metrics().observeRoot(in, answer, failure) }()
	if err := s.limits.check(in); err != nil {
		return nil, err
	}
	start := s.clock.Now().Add(-time.Duration(in.ElapsedNs))
	h, ok := s.services.Aggregation(in.Service)
	if !ok {
		return nil, fmt.Errorf("%w %q on node %s", nerr.ErrUnknownService, in.Service, s.self)
	}
	agg := h.Operators
	if agg == nil {
		return nil, fmt.Errorf("%w: service %q has no aggregation operators", nerr.ErrUnknownMethod, in.Service)
	}
	c := &call{in: in, start: start, local: agg.Local[in.Local], reduce: agg.Reduce[in.Reduce], byParent: map[int32][]*pb.Participant{}}
	if c.local == nil || c.reduce == nil {
		return nil, fmt.Errorf("%w: service %q has no Local %q or Reduce %q", nerr.ErrUnknownMethod, in.Service, in.Local, in.Reduce)
	}
	var self *pb.Participant
	for _, p := range in.Participants {
		if p.Index == in.Self {
			self = p
			continue
		}
		c.byParent[p.Parent] = append(c.byParent[p.Parent], p)
	}
	if in.Self >= 0 {
		if self == nil {
			return nil, fmt.Errorf("neptune: aggregate %s: participant %d is not in its own subtree", in.CallId, in.Self)
		}
		if !slices.Contains(h.Partitions, self.Partition) {
			return nil, fmt.Errorf("%w %d of service %q on node %s", nerr.ErrUnknownPartition, self.Partition, in.Service, s.self)
		}
	}
	c.children = c.byParent[in.Self]
	kids := make([]int, len(c.children))
	for i, ch := range c.children {
		kids[i] = int(ch.Index)
	}
	c.cfg = dac.MachineConfig{Local: in.Self >= 0, Children: kids, Deadline: start.Add(time.Duration(in.DeadlineNs)), Grace: time.Duration(in.GraceNs), Progress: progress != nil}
	c.progress = progress
	if self != nil {
		c.cfg.Partition = int(self.Partition)
	}
	c.m = dac.NewMachine(c.cfg)
	c.owed = h.Ledger.Commit(c.cfg.Local, len(c.children))
	defer c.owed.Release()
	ctx, span := s.startNode(ctx, c)
	defer func() {
		if span != nil && answer != nil {
			span.SetAttributes(attribute.Int("neptune.contributing", len(answer.Partitions)))
		}
		endSpan(span, failure)
	}()
	if !in.Blocking {
		c.exec = h.Workers.Do
		return s.run(ctx, c)
	}
	// Blocking (NoED, an experiment's baseline): the call holds one worker
	// from before it forwards to its children until it sends, and runs its
	// operators in it, one at a time.
	var out *pb.AggregateResponse
	var rerr error
	held := make(chan struct{}, 1)
	c.exec = func(ctx context.Context, _ string, f func(context.Context)) error {
		select {
		case held <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-held }()
		f(ctx)
		return nil
	}
	err := h.Workers.Do(ctx, in.Class, func(ctx context.Context) {
		out, rerr = s.run(ctx, c)
	})
	return out, errors.Join(err, rerr)
}

// run drives c's machine: forwards to the children, runs the operators
// through c.exec and waits for events until the machine sends, paying off
// c.owed as operators finish.
func (s *Server) run(ctx context.Context, c *call) (*pb.AggregateResponse, error) {
	in, deadline, grace := c.in, c.cfg.Deadline, c.cfg.Grace
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Every goroutine below sends at most once per child, local, reduction
	// or timer, so the buffer lets them all finish after this call returns.
	events := make(chan event, 2*len(c.children)+4)
	hop := hopFor(time.Duration(in.DeadlineNs))
	for _, ch := range c.children {
		sub := subtree(c.byParent, ch)
		go func() {
			resp, err := s.caller.child(ctx, c.start, in, ch, sub, hop)
			e := event{ev: dac.Event{Kind: dac.ChildDone, From: int(ch.Index)}}
			if err == nil {
				e.ev.Partial = dac.Partial{Partitions: ints(resp.Partitions), Data: resp.Data}
				e.stats = resp
			}
			events <- e
		}()
	}
	out := &pb.AggregateResponse{}
	var timers []clock.Timer
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
	}()
	for {
		for _, act := range c.m.Ready() {
			switch act.Kind {
			case dac.RunLocal:
				go func() {
					lctx, lcancel := clock.WithDeadline(ctx, s.clock, deadline)
					defer lcancel()
					var data []byte
					var lerr error
					var cost time.Duration
					err := c.exec(lctx, in.Class, func(ctx context.Context) {
						ctx, span := s.startOp(ctx, "neptune.aggregate.local", c.cfg.Partition)
						t0 := s.clock.Now()
						data, lerr = runLocal(ctx, c.local, c.cfg.Partition, in.LocalParams)
						cost = s.clock.Since(t0)
						endSpan(span, lerr)
					})
					events <- event{ev: dac.Event{Kind: dac.LocalDone, Data: data, Err: errors.Join(err, lerr)}, local: cost}
				}()
			case dac.RunReduce:
				a, b := bytesOf(act.A), bytesOf(act.B)
				go func() {
					rctx, rcancel := clock.WithDeadline(ctx, s.clock, deadline.Add(grace))
					defer rcancel()
					var data []byte
					var rerr error
					var cost time.Duration
					err := c.exec(rctx, ReduceClass, func(ctx context.Context) {
						ctx, span := s.startOp(ctx, "neptune.aggregate.reduce", -1)
						t0 := s.clock.Now()
						data, rerr = runReduce(ctx, c.reduce, a, b, in.ReduceParams)
						cost = s.clock.Since(t0)
						endSpan(span, rerr)
					})
					events <- event{ev: dac.Event{Kind: dac.ReduceDone, Seq: act.Seq, Data: data, Err: errors.Join(err, rerr)}, ran: err == nil, cost: cost}
				}()
			case dac.SetTimer:
				timers = append(timers, s.clock.AfterFunc(s.clock.Until(act.At), func() {
					events <- event{ev: dac.Event{Kind: dac.Timeout}}
				}))
			case dac.Progress:
				c.progress(act.Partial)
			case dac.Send:
				out.Partitions = int32s(act.Partial.Partitions)
				out.Data = bytesOf(act.Partial.Data)
				return out, nil
			}
		}
		select {
		case e := <-events:
			if e.stats != nil {
				out.LocalNs += e.stats.LocalNs
				out.Locals += e.stats.Locals
				out.ReduceNs += e.stats.ReduceNs
				out.Reductions += e.stats.Reductions
				out.Hedges += e.stats.Hedges
			}
			if e.local > 0 {
				out.LocalNs += int64(e.local)
				out.Locals++
			}
			if e.ran {
				out.ReduceNs += int64(e.cost)
				out.Reductions++
			}
			switch e.ev.Kind {
			case dac.LocalDone:
				c.owed.LocalDone(e.local)
			case dac.ReduceDone:
				c.owed.ReduceDone(e.cost)
			}
			if err := c.m.Step(e.ev); err != nil {
				return nil, fmt.Errorf("neptune: aggregate %s: %w", in.CallId, err)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func runLocal(ctx context.Context, f service.LocalFunc, partition int, params []byte) (data []byte, err error) {
	defer recoverInto(&err)
	return f(ctx, partition, params)
}

func runReduce(ctx context.Context, f service.ReduceFunc, a, b, params []byte) (data []byte, err error) {
	defer recoverInto(&err)
	return f(ctx, a, b, params)
}

// subtree returns root and every participant below it.
func subtree(byParent map[int32][]*pb.Participant, root *pb.Participant) []*pb.Participant {
	out := []*pb.Participant{root}
	for i := 0; i < len(out); i++ {
		out = append(out, byParent[out[i].Index]...)
	}
	return out
}

// reduceFirst serves queued reductions before other work (DAC §4.3): a
// reduction finishes a call that already holds its inputs, new local work
// starts one. Other requests are ordered by the wrapped scheduler. Not safe
// for concurrent use (the pool holds its lock).
type reduceFirst struct {
	reduce *sched.FIFO
	rest   sched.Scheduler
}

// WithReduceFirst wraps the scheduler of a service with aggregation
// operators; others keep theirs unwrapped (and their class statistics).
func WithReduceFirst(svc *service.Service, rest sched.Scheduler) sched.Scheduler {
	if svc.Aggregate == nil {
		return rest
	}
	return &reduceFirst{reduce: sched.NewFIFO(), rest: rest}
}

func (s *reduceFirst) Push(now time.Time, r *sched.Request) {
	if r.Class == ReduceClass {
		s.reduce.Push(now, r)
		return
	}
	s.rest.Push(now, r)
}

func (s *reduceFirst) Pop(now time.Time) (*sched.Request, []*sched.Request) {
	next, dropped := s.reduce.Pop(now)
	if next != nil {
		return next, dropped
	}
	next, more := s.rest.Pop(now)
	return next, append(dropped, more...)
}

func (s *reduceFirst) Finish(now time.Time, r *sched.Request, used time.Duration) {
	if r.Class != ReduceClass {
		s.rest.Finish(now, r, used)
	}
}

func (s *reduceFirst) Abandon(now time.Time, r *sched.Request) {
	if r.Class != ReduceClass {
		s.rest.Abandon(now, r)
	}
}

func (s *reduceFirst) Len() int { return s.reduce.Len() + s.rest.Len() }
