package neptune

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// reduceClass is the pool class of aggregation reductions; reduceFirst
// serves it before anything else.
const reduceClass = "neptune/reduce"

// reduceFirst serves queued reductions before other work (DAC §4.3): a
// reduction finishes a call that already holds its inputs, new local work
// starts one. Other requests are ordered by the wrapped scheduler. Not safe
// for concurrent use (the pool holds its lock).
type reduceFirst struct {
	reduce *sched.FIFO
	rest   sched.Scheduler
}

// withReduceFirst wraps the scheduler of a service with aggregation
// operators; others keep theirs unwrapped (and their class statistics).
func withReduceFirst(svc Service, rest sched.Scheduler) sched.Scheduler {
	if svc.Aggregate == nil {
		return rest
	}
	return &reduceFirst{reduce: sched.NewFIFO(), rest: rest}
}

func (s *reduceFirst) Push(now time.Time, r *sched.Request) {
	if r.Class == reduceClass {
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
	if r.Class != reduceClass {
		s.rest.Finish(now, r, used)
	}
}

func (s *reduceFirst) Len() int { return s.reduce.Len() + s.rest.Len() }

// aggWork answers the aggregation part of a load poll: the service's
// ledger and worker count.
func (n *Node) aggWork(service string) (transport.Work, bool) {
	h, ok := n.services[service]
	if !ok || h.ledger == nil {
		return transport.Work{}, false
	}
	return transport.Work{Pending: h.ledger.Pending(), Capacity: h.pool.Workers()}, true
}

func (s *nodeServer) Aggregate(ctx context.Context, in *pb.AggregateRequest) (*pb.AggregateResponse, error) {
	resp, err := s.n.aggregate(ctx, in)
	if err != nil {
		return nil, transport.ToStatus(err)
	}
	return resp, nil
}

// aggEvent is a Machine event with the costs measured on the way.
type aggEvent struct {
	ev    dac.Event
	stats *pb.AggregateResponse // a child's subtree stats
	local time.Duration
	ran   bool // a reduction ran (its cost is in reduce)
	cost  time.Duration
}

// aggregate runs this node's part of an aggregation: its local operator on
// the pool, its children's subtrees by forwarding, reductions on the pool
// ahead of local work. It waits for children in this RPC's goroutine, which
// holds no worker slot.
func (n *Node) aggregate(ctx context.Context, in *pb.AggregateRequest) (*pb.AggregateResponse, error) {
	start := time.Now().Add(-time.Duration(in.ElapsedNs))
	h, ok := n.services[in.Service]
	if !ok {
		return nil, fmt.Errorf("%w %q on node %s", nerr.ErrUnknownService, in.Service, n.cfg.ID)
	}
	agg := h.svc.Aggregate
	if agg == nil {
		return nil, fmt.Errorf("%w: service %q has no aggregation operators", nerr.ErrUnknownMethod, in.Service)
	}
	local, reduce := agg.Local[in.Local], agg.Reduce[in.Reduce]
	if local == nil || reduce == nil {
		return nil, fmt.Errorf("%w: service %q has no Local %q or Reduce %q", nerr.ErrUnknownMethod, in.Service, in.Local, in.Reduce)
	}
	byParent := map[int32][]*pb.Participant{}
	var self *pb.Participant
	for _, p := range in.Participants {
		if p.Index == in.Self {
			self = p
			continue
		}
		byParent[p.Parent] = append(byParent[p.Parent], p)
	}
	if in.Self >= 0 {
		if self == nil {
			return nil, fmt.Errorf("neptune: aggregate %s: participant %d is not in its own subtree", in.CallId, in.Self)
		}
		if !slices.Contains(h.partitions, self.Partition) {
			return nil, fmt.Errorf("%w %d of service %q on node %s", nerr.ErrUnknownPartition, self.Partition, in.Service, n.cfg.ID)
		}
	}
	children := byParent[in.Self]
	kids := make([]int, len(children))
	for i, ch := range children {
		kids[i] = int(ch.Index)
	}
	deadline := start.Add(time.Duration(in.DeadlineNs))
	grace := time.Duration(in.GraceNs)
	cfg := dac.MachineConfig{Local: in.Self >= 0, Children: kids, Deadline: deadline, Grace: grace}
	if self != nil {
		cfg.Partition = int(self.Partition)
	}
	m := dac.NewMachine(cfg)
	owed := h.ledger.Commit(cfg.Local, len(children))
	defer owed.Release()
	if !in.Blocking {
		return n.aggRun(ctx, in, h.pool.Do, local, reduce, m, cfg, owed, byParent, children, start)
	}
	// Blocking (NoED): the call holds one worker from before it forwards
	// to its children until it sends, and runs its operators in it, one at
	// a time.
	var out *pb.AggregateResponse
	var rerr error
	held := make(chan struct{}, 1)
	inHeld := func(ctx context.Context, _ string, f func(context.Context)) error {
		select {
		case held <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-held }()
		f(ctx)
		return nil
	}
	err := h.pool.Do(ctx, in.Class, func(ctx context.Context) {
		out, rerr = n.aggRun(ctx, in, inHeld, local, reduce, m, cfg, owed, byParent, children, start)
	})
	return out, errors.Join(err, rerr)
}

// aggRun drives m: forwards to the children, runs the operators through
// exec and waits for events until the machine sends, paying off owed as
// operators finish.
func (n *Node) aggRun(ctx context.Context, in *pb.AggregateRequest, exec func(context.Context, string, func(context.Context)) error,
	local LocalFunc, reduce ReduceFunc, m *dac.Machine, cfg dac.MachineConfig, owed *dac.Commitment, byParent map[int32][]*pb.Participant, children []*pb.Participant, start time.Time) (*pb.AggregateResponse, error) {
	deadline, grace := cfg.Deadline, cfg.Grace
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Every goroutine below sends at most once per child, local, reduction
	// or timer, so the buffer lets them all finish after this call returns.
	events := make(chan aggEvent, 2*len(children)+4)
	hop := max(2*time.Millisecond, time.Duration(in.DeadlineNs)/100)
	for _, ch := range children {
		sub := subtree(byParent, ch)
		go func() {
			resp, err := n.client.aggChild(ctx, start, in, ch, sub, hop)
			e := aggEvent{ev: dac.Event{Kind: dac.ChildDone, From: int(ch.Index)}}
			if err == nil {
				e.ev.Partial = dac.Partial{Partitions: ints(resp.Partitions), Data: resp.Data}
				e.stats = resp
			}
			events <- e
		}()
	}
	out := &pb.AggregateResponse{}
	var timers []*time.Timer
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
	}()
	for {
		for _, act := range m.Ready() {
			switch act.Kind {
			case dac.RunLocal:
				go func() {
					lctx, lcancel := context.WithDeadline(ctx, deadline)
					defer lcancel()
					var data []byte
					var lerr error
					var cost time.Duration
					err := exec(lctx, in.Class, func(ctx context.Context) {
						t0 := time.Now()
						data, lerr = runLocal(ctx, local, cfg.Partition, in.LocalParams)
						cost = time.Since(t0)
					})
					events <- aggEvent{ev: dac.Event{Kind: dac.LocalDone, Data: data, Err: errors.Join(err, lerr)}, local: cost}
				}()
			case dac.RunReduce:
				a, b := bytesOf(act.A), bytesOf(act.B)
				go func() {
					rctx, rcancel := context.WithDeadline(ctx, deadline.Add(grace))
					defer rcancel()
					var data []byte
					var rerr error
					var cost time.Duration
					err := exec(rctx, reduceClass, func(ctx context.Context) {
						t0 := time.Now()
						data, rerr = runReduce(ctx, reduce, a, b, in.ReduceParams)
						cost = time.Since(t0)
					})
					events <- aggEvent{ev: dac.Event{Kind: dac.ReduceDone, Seq: act.Seq, Data: data, Err: errors.Join(err, rerr)}, ran: err == nil, cost: cost}
				}()
			case dac.SetTimer:
				timers = append(timers, time.AfterFunc(time.Until(act.At), func() {
					events <- aggEvent{ev: dac.Event{Kind: dac.Timeout}}
				}))
			case dac.Send:
				out.Partitions = make([]int32, len(act.Partial.Partitions))
				for i, p := range act.Partial.Partitions {
					out.Partitions[i] = int32(p)
				}
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
				owed.LocalDone(e.local)
			case dac.ReduceDone:
				owed.ReduceDone(e.cost)
			}
			if err := m.Step(e.ev); err != nil {
				return nil, fmt.Errorf("neptune: aggregate %s: %w", in.CallId, err)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func bytesOf(d any) []byte {
	b, _ := d.([]byte)
	return b
}

func runLocal(ctx context.Context, f LocalFunc, partition int, params []byte) (data []byte, err error) {
	defer recoverInto(&err)
	return f(ctx, partition, params)
}

func runReduce(ctx context.Context, f ReduceFunc, a, b, params []byte) (data []byte, err error) {
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
