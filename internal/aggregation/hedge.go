package aggregation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Hedging limits: a leaf is re-issued once it is slower than the p95 of the
// last leafWindow leaf latencies (given at least leafMinSamples); hedges
// stay within 5% of leaf executions.
const (
	leafWindow     = 200
	leafMinSamples = 20
	// The budget counts in leaf calls: every leavesPerHedge leaf calls earn
	// one hedge (5%), and at most hedgeBurst hedges are saved.
	leavesPerHedge = 20
	hedgeBurst     = 5
)

// child runs target's subtree of an aggregation: it asks target's first
// replica and, if that one fails, the next (a failed replica is replaced
// while the deadline allows). A leaf slower than the recent p95 is also
// sent to the next replica when hedging is on, the budget allows and the
// deadline leaves time for it; the first answer wins.
func (c *Caller) child(ctx context.Context, start time.Time, base *pb.AggregateRequest, target *pb.Participant, sub []*pb.Participant, hop time.Duration) (*pb.AggregateResponse, error) {
	due := start.Add(time.Duration(target.DeadlineNs))
	// The target sends by due+grace; the slack covers a loaded network
	// stack. A parent drops late answers anyway and cancels when done.
	ctx, cancel := clock.WithDeadline(ctx, c.clock, due.Add(time.Duration(base.GraceNs)+5*hop))
	defer cancel()
	leaf := len(sub) == 1 && target.Index >= 0
	type result struct {
		resp *pb.AggregateResponse
		err  error
		took time.Duration
	}
	replicas, err := c.resolve(base.Service, target, sub)
	if err != nil {
		return nil, err
	}
	results := make(chan result, len(replicas))
	next, running, hedges := 0, 0, int32(0)
	launch := func() {
		r := replicas[next]
		next++
		running++
		go func() {
			t0 := c.clock.Now()
			resp, err := c.send(ctx, start, base, target, sub, r)
			results <- result{resp, err, c.clock.Since(t0)}
		}()
	}
	launch()
	var hedgeC <-chan time.Time
	if leaf && base.Hedge && len(replicas) > 1 {
		if after, typical, ok := c.st.hedgeDelay(base.Service); ok && c.clock.Now().Add(after+typical).Before(due) {
			t := c.clock.NewTimer(after)
			defer t.Stop()
			hedgeC = t.Chan()
		}
	}
	var last error
	for running > 0 {
		select {
		case res := <-results:
			running--
			if res.err == nil {
				if leaf {
					c.st.leafDone(base.Service, res.took)
				}
				res.resp.Hedges += hedges
				return res.resp, nil
			}
			last = res.err
			if ctx.Err() != nil || errors.Is(res.err, nerr.ErrUnknownMethod) {
				continue
			}
			if running == 0 && next < len(replicas) {
				launch()
			}
		case <-hedgeC:
			if next < len(replicas) && c.st.takeHedge() {
				hedges++
				launch()
			}
		}
	}
	return nil, last
}

// resolve returns the replicas target's subtree may be sent to: the nodes
// target names, in its order, each at the RPC address the yellow pages
// hold for it, and only those the yellow pages announce as hosting
// target's partition (for Base's coordinator, index -1: a partition of
// the subtree). An AggregateRequest comes from whoever may call
// Aggregate, so its rpc_addr fields are never dialed: otherwise any
// client could make a node open connections to any address (and, with
// mutual TLS, present its node certificate there), or steer a subtree to
// a process that is not a member. A node not announced for the
// partition is left out, and none left is ErrNoReplica.
func (c *Caller) resolve(service string, target *pb.Participant, sub []*pb.Participant) ([]*pb.ReplicaAddr, error) {
	parts := []int32{target.Partition}
	if target.Index < 0 {
		parts = parts[:0]
		for _, p := range sub {
			if p.Index >= 0 && !slices.Contains(parts, p.Partition) {
				parts = append(parts, p.Partition)
			}
		}
	}
	announced := map[string]string{}
	for _, p := range parts {
		for _, r := range c.cfg.Directory.Replicas(service, p).Replicas {
			announced[r.Node] = r.RPCAddr
		}
	}
	out := make([]*pb.ReplicaAddr, 0, len(target.Replicas))
	var refused []string
	for _, r := range target.Replicas {
		addr, ok := announced[r.Node]
		if !ok || addr == "" || slices.ContainsFunc(out, func(o *pb.ReplicaAddr) bool { return o.Node == r.Node }) {
			refused = append(refused, r.Node)
			continue
		}
		out = append(out, &pb.ReplicaAddr{Node: r.Node, RpcAddr: addr})
	}
	if len(out) == 0 {
		if len(refused) == 0 {
			return nil, fmt.Errorf("%w: participant %d of %s names no replica", nerr.ErrNoReplica, target.Index, service)
		}
		if len(refused) > 5 {
			refused = append(refused[:5], "…")
		}
		return nil, fmt.Errorf("%w: participant %d of %s: no node it names (%s) is announced for its partition", nerr.ErrNoReplica, target.Index, service, strings.Join(refused, ", "))
	}
	return out, nil
}

// send sends target's subtree to replica r.
func (c *Caller) send(ctx context.Context, start time.Time, base *pb.AggregateRequest, target *pb.Participant, sub []*pb.Participant, r *pb.ReplicaAddr) (*pb.AggregateResponse, error) {
	cl, err := c.cfg.Dialer.ClientFor(r.Node, r.RpcAddr)
	if err != nil {
		return nil, err
	}
	out, err := cl.Aggregate(ctx, c.request(start, base, target, sub))
	if err != nil {
		err = transport.FromStatus(r.Node, err)
		if transport.IsTransport(err) && ctx.Err() == nil {
			c.cfg.Directory.Exclude(r.Node)
		}
		return nil, err
	}
	return out, nil
}

// request is what target is sent: its subtree sub of the call base, with
// the time elapsed since start.
func (c *Caller) request(start time.Time, base *pb.AggregateRequest, target *pb.Participant, sub []*pb.Participant) *pb.AggregateRequest {
	return &pb.AggregateRequest{
		CallId: base.CallId, Service: base.Service, Local: base.Local, LocalParams: base.LocalParams,
		Reduce: base.Reduce, ReduceParams: base.ReduceParams, Self: target.Index,
		ElapsedNs: int64(c.clock.Since(start)), DeadlineNs: target.DeadlineNs, GraceNs: base.GraceNs,
		Hedge: base.Hedge, Class: base.Class, Blocking: base.Blocking, Participants: sub,
	}
}

// latencyRing holds the last leafWindow leaf latencies of a service.
type latencyRing struct {
	xs   []time.Duration
	next int
}

func (s *state) leafDone(service string, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaf == nil {
		s.leaf = map[string]*latencyRing{}
	}
	r := s.leaf[service]
	if r == nil {
		r = &latencyRing{}
		s.leaf[service] = r
	}
	if len(r.xs) < leafWindow {
		r.xs = append(r.xs, took)
	} else {
		r.xs[r.next] = took
		r.next = (r.next + 1) % leafWindow
	}
	s.tokens = min(s.tokens+1, hedgeBurst*leavesPerHedge)
}

// hedgeDelay is when a leaf counts as slow (the recent p95) and how long a
// typical leaf takes (the median); ok is false until enough samples exist.
func (s *state) hedgeDelay(service string) (after, typical time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.leaf[service]
	if r == nil || len(r.xs) < leafMinSamples {
		return 0, 0, false
	}
	xs := slices.Clone(r.xs)
	slices.Sort(xs)
	return xs[len(xs)*95/100], xs[len(xs)/2], true
}

// takeHedge spends one hedge from the budget if there is one.
func (s *state) takeHedge() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens < leavesPerHedge {
		return false
	}
	s.tokens -= leavesPerHedge
	return true
}
