package aggregation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Progress is one partial result of a streaming aggregation
// (Caller.Stream): the tree's reduced result so far and its quality.
type Progress struct {
	// Data is the reduced result of the Contributing partitions.
	Data []byte
	// Contributing are the partitions in Data; Missing the call's other
	// partitions (not in yet, or lost). Both sorted.
	Contributing, Missing []int
	// Coverage is len(Contributing) / len(Partitions).
	Coverage float64
	// QualityMet says Contributing meets the call's quality ρ: a caller
	// that stops here gets a successful (partial or full) Result.
	QualityMet bool
	// Final marks the last one: the tree is done, or its deadline passed.
	Final bool
}

// Stream is a streaming aggregation in flight: Next returns its partial
// results as the tree reduces them, Close stops it early. One goroutine
// reads with Next; Close and Result may be called from any.
type Stream struct {
	cancel context.CancelFunc
	// next holds the newest undelivered Progress (newest wins: a reader
	// slower than the tree skips intermediate ones, never the final); it
	// is closed after the last.
	next   chan *Progress
	done   chan struct{}
	closed atomic.Bool
	res    *Result
	err    error
}

// Next returns the next partial result, each covering more partitions
// than the one before, the last with Final set; then io.EOF. A call that
// failed outright (an unknown service, operator, or ctx ending before
// Close) ends with its error instead.
func (s *Stream) Next() (*Progress, error) {
	p, ok := <-s.next
	if ok {
		return p, nil
	}
	if s.res == nil {
		return nil, s.err
	}
	return nil, io.EOF
}

// Close stops the aggregation: the tree's remaining work is cancelled
// (every node's call ends, queued operators never run) and Result then
// reports the last partial result. Close after the end does nothing.
func (s *Stream) Close() error {
	s.closed.Store(true)
	s.cancel()
	<-s.done
	return nil
}

// Done is closed once the aggregation has ended.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Result waits for the end and returns what Aggregate would have: the
// final result, ErrBelowQuality with what did arrive when too few
// partitions contributed. After Close it is the last partial result
// received, judged by the same quality.
func (s *Stream) Result() (*Result, error) {
	<-s.done
	return s.res, s.err
}

// offer makes p the newest undelivered Progress. Only run calls it.
func (s *Stream) offer(p *Progress) {
	select {
	case <-s.next:
	default:
	}
	s.next <- p
}

// Stream runs an aggregation like Aggregate, but the top of the tree
// streams its reduced result each time it grows, so the caller sees
// partial results (with their quality) before the deadline and may stop
// early. Planning errors return at once; the rest arrive through the
// Stream. Deadlines and quality are Aggregate's: the final result comes
// by the deadline T and is judged against ρ.
func (c *Caller) Stream(ctx context.Context, a Aggregation, x Experiment) (*Stream, error) {
	var sp *callSpan
	if c.cfg.Tracer != nil {
		ctx, sp = c.startCall(ctx, a)
	}
	parent := ctx
	l, err := c.prepare(ctx, a, x, sp)
	if err != nil {
		c.cfg.Metrics.observe(a, nil, err)
		if sp != nil {
			sp.end(nil, err)
		}
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Stream{cancel: cancel, next: make(chan *Progress, 1), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer cancel()
		final, err := c.streamTop(ctx, l, s.offer)
		if s.closed.Load() {
			// Stopped by the caller: the last partial is the answer.
			err = nil
		}
		s.res, s.err = c.conclude(parent, a, l, final, err)
		c.cfg.Metrics.observe(a, s.res, s.err)
		if sp != nil {
			sp.end(s.res, s.err)
		}
		if s.res != nil {
			if p, perr := assess(l.req, final, true); perr == nil {
				s.offer(p)
			}
		}
		close(s.next)
	}()
	return s, nil
}

// streamTop runs the whole tree through its top with AggregateStream,
// passing each progress frame that covers more partitions than any before
// to emit. A failed top is replaced by its next replica while the
// deadline allows, which starts the tree again: its frames count only once
// they cover more than what was shown. It returns the final frame, or,
// when no top finished, the largest progress frame (nil if none) with the
// last failure.
func (c *Caller) streamTop(ctx context.Context, l *launch, emit func(*Progress)) (*pb.AggregateResponse, error) {
	due := l.start.Add(time.Duration(l.top.DeadlineNs))
	ctx, cancel := clock.WithDeadline(ctx, c.clock, due.Add(time.Duration(l.base.GraceNs)+5*l.hop))
	defer cancel()
	replicas, err := c.resolve(l.base.Service, l.top, l.parts)
	if err != nil {
		return nil, err
	}
	var best *pb.AggregateResponse
	var last error
	for _, r := range replicas {
		final, err := c.streamFrom(ctx, l, r, func(f *pb.AggregateResponse, p *Progress) {
			if best == nil || len(f.Partitions) > len(best.Partitions) {
				best = f
				emit(p)
			}
		})
		if err == nil {
			if best != nil && len(best.Partitions) > len(final.Partitions) {
				// A replacement top finished with less than its
				// predecessor showed: the larger result stands.
				best.LocalNs, best.Locals, best.ReduceNs, best.Reductions, best.Hedges = final.LocalNs, final.Locals, final.ReduceNs, final.Reductions, final.Hedges
				return best, nil
			}
			return final, nil
		}
		last = err
		if ctx.Err() != nil || errors.Is(err, nerr.ErrUnknownMethod) || errors.Is(err, nerr.ErrUnknownService) {
			break
		}
	}
	return best, last
}

// streamFrom runs the tree through replica r, passing every valid
// progress frame to seen, and returns its final frame.
func (c *Caller) streamFrom(ctx context.Context, l *launch, r *pb.ReplicaAddr, seen func(*pb.AggregateResponse, *Progress)) (*pb.AggregateResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the RPC, and with it the node's part of the tree
	cl, err := c.cfg.Dialer.ClientFor(r.Node, r.RpcAddr)
	if err != nil {
		return nil, err
	}
	fail := func(err error) error {
		err = transport.FromStatus(r.Node, err)
		if transport.IsTransport(err) && ctx.Err() == nil {
			c.cfg.Directory.Exclude(r.Node)
		}
		return err
	}
	st, err := cl.AggregateStream(ctx, c.request(l.start, l.base, l.top, l.parts))
	if err != nil {
		return nil, fail(err)
	}
	for {
		f, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("neptune: aggregate %s: node %s ended the stream without its final frame", l.base.CallId, r.Node)
		}
		if err != nil {
			return nil, fail(err)
		}
		p, err := assess(l.req, f, f.Final)
		if err != nil {
			return nil, fmt.Errorf("neptune: aggregate %s: node %s: %w", l.base.CallId, r.Node, err)
		}
		if f.Final {
			return f, nil
		}
		seen(f, p)
	}
}

// assess checks a frame from the top of a call's tree and says what it
// holds. The frame comes from a peer: a partition outside the call, or
// listed twice, makes it invalid (and its node's answer worthless).
func assess(req dac.Request, f *pb.AggregateResponse, final bool) (*Progress, error) {
	p := &Progress{Final: final}
	if f != nil {
		p.Data = f.Data
		p.Contributing = ints(f.Partitions)
	}
	slices.Sort(p.Contributing)
	all := slices.Sorted(slices.Values(req.Partitions))
	for i, part := range p.Contributing {
		if i > 0 && p.Contributing[i-1] == part {
			return nil, fmt.Errorf("invalid frame: partition %d listed twice", part)
		}
		if _, in := slices.BinarySearch(all, part); !in {
			return nil, fmt.Errorf("invalid frame: partition %d is not in the call", part)
		}
	}
	for _, part := range all {
		if _, in := slices.BinarySearch(p.Contributing, part); !in {
			p.Missing = append(p.Missing, part)
		}
	}
	if n := len(req.Partitions); n > 0 {
		p.Coverage = float64(len(p.Contributing)) / float64(n)
	}
	p.QualityMet = len(p.Contributing) >= req.Needed()
	return p, nil
}
