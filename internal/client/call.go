package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/obs"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// request is one call on its way: the wire request, completed from the
// yellow pages by the first pick (its mode, and a read's session floor).
type request struct {
	in     *pb.CallRequest
	stream bool // Stream, not Call
	sess   *Session
	usage  *service.CallUsage // filled from the answer's trailer if set
	// maybeRan: an attempt of this write may have executed — one of this
	// call's, or, for a retry (WithRetryOf), the call it retries. From
	// then on every error the call returns says so and carries the
	// write's identity, so no retry loop ever takes it for "never ran"
	// and sends it again as a new write.
	maybeRan bool
	// span is the call's span when the call is traced (nil otherwise):
	// its attempts, polls and chosen replicas are recorded on it.
	span     trace.Span
	attempts int
	// affine is the call's affinity key (WithAffinity), for the policy.
	affine string
}

func (r *request) mode() service.Mode { return service.Mode(r.in.Mode) }

// identified reports whether the request carries a write identity.
func (r *request) identified() bool { return !transport.WriteIDOf(r.in).IsZero() }

// outcome is the error a call ends with: for a write that may have run
// (r.maybeRan, or err itself says so), an UnknownOutcomeError carrying
// the write's identity, unless err is a definite answer (the handler's
// own error: the write ran, or a retry got the first attempt's result).
func (r *request) outcome(err error) error {
	if !r.maybeRan && (r.mode() != service.Write || !outcomeOpen(err)) {
		return err
	}
	var remote *transport.RemoteError
	if errors.As(err, &remote) {
		return err
	}
	w := transport.WriteIDOf(r.in)
	return &nerr.UnknownOutcomeError{Identified: !w.IsZero(), WriteID: w, Cause: err}
}

// failed is the error a call that failed with err returns: err naming
// the call's request id rid, recorded on its span if traced.
func (r *request) failed(rid string, err error) error {
	if r.span != nil {
		r.span.RecordError(err)
		r.span.SetStatus(codes.Error, err.Error())
	}
	return &obs.Error{ID: rid, Err: err}
}

// newRequest is a Call's request. A retry of a write of unknown outcome
// (WithRetryOf) reuses its identity and knows the write may have run.
func newRequest(svc string, partition int, method string, body []byte, o options) *request {
	r := &request{in: &pb.CallRequest{Service: svc, Partition: int32(partition), Method: method, Body: body, Class: o.class,
		IdempotencyKey: o.key}, sess: o.session, usage: o.usage, affine: o.affine}
	if o.retryOf != nil {
		if o.key == "" {
			transport.SetWriteID(r.in, o.retryOf.WriteID)
		}
		r.maybeRan = true
	}
	return r
}

// resolve checks what the yellow pages say against the request and
// completes it, so a wrong call fails with the precise error before any
// network traffic: an unknown service, partition or method, or a method of
// the other kind (a stream method through Call or the reverse). The mode
// comes from the method's announced declaration.
func (r *request) resolve(look membership.Lookup) error {
	in := r.in
	switch m := look.Method; {
	case m != nil && m.Stream && !r.stream:
		return fmt.Errorf("%w: %s.%s is a stream method; use Client.Stream", nerr.ErrWrongMode, in.Service, in.Method)
	case m != nil && !m.Stream && r.stream:
		return fmt.Errorf("%w: %s.%s is not a stream method; use Client.Call", nerr.ErrWrongMode, in.Service, in.Method)
	case m != nil:
		in.Mode = m.Mode
		in.MinVersion = r.sess.floor(in.Service, int(in.Partition), r.mode())
	case look.ServiceKnown && len(look.Replicas) > 0:
		return fmt.Errorf("%w %q in service %q", nerr.ErrUnknownMethod, in.Method, in.Service)
	}
	switch {
	case len(look.Replicas) > 0:
		return nil
	case look.PartitionKnown:
		return fmt.Errorf("%w for %s partition %d", nerr.ErrNoReplica, in.Service, in.Partition)
	case look.ServiceKnown:
		return fmt.Errorf("%w %d of service %q", nerr.ErrUnknownPartition, in.Partition, in.Service)
	}
	return fmt.Errorf("%w %q", nerr.ErrUnknownService, in.Service)
}

// Call runs method on partition of service somewhere in the cluster and
// returns its response. The method's mode (read or write) is the one the
// service announces. The call goes to the replica the balancing policy
// picks; if the connection fails, up to three replicas are tried and a
// failed node is excluded until it announces itself again. A call that
// still fails with a retryable error is tried again under the client's
// retry policy (Config.Retry, or WithRetry), the write keeping its
// identity.
func (c *Client) Call(ctx context.Context, svc string, partition int, method string, body []byte, opts ...Option) (*service.Response, error) {
	o := collect(opts)
	r := newRequest(svc, partition, method, body, o)
	if c.tracer != nil {
		ctx, r.span = c.tracer.Start(ctx, "neptune.client.Call", trace.WithAttributes(
			attribute.String("neptune.service", svc), attribute.Int("neptune.partition", partition), attribute.String("neptune.method", method)))
		defer r.span.End()
	}
	// The call's request id: the gateway's (or the caller's) if ctx has
	// one, else its trace id, else new; every node that handles the call
	// logs it, and a failed call's error names it.
	ctx, rid := obs.EnsureRequestID(ctx)
	if len(body) > c.maxBody {
		return nil, r.failed(rid, r.outcome(fmt.Errorf("%w: request body of %d bytes exceeds the limit of %d (ClientConfig.MaxMessageBytes); it was not sent, so this call never ran", nerr.ErrTooLarge, len(body), c.maxBody)))
	}
	start := c.clock.Now()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = clock.WithTimeout(ctx, c.clock, o.timeout)
		defer cancel()
	}
	policy := c.retry
	if o.retry != nil {
		policy = o.retry.WithDefaults()
	}
	resp, err := retrying(ctx, c.clock, policy, rand.Float64, c.metrics.retries.Inc, func() (*service.Response, error) {
		return c.call(ctx, r)
	})
	c.metrics.calls.WithLabelValues(svc, method, nerr.Label(err)).Inc()
	c.metrics.latency.WithLabelValues(svc, method).Observe(c.clock.Since(start).Seconds())
	if r.span != nil {
		r.span.SetAttributes(attribute.Int("neptune.attempts", r.attempts), attribute.String(obs.LogKey, rid))
	}
	if err != nil {
		return nil, r.failed(rid, err)
	}
	o.session.observe(svc, partition, resp.Version)
	return resp, nil
}

// call sends r to the replica pick chooses, and again to another after a
// transport failure or, while the partition is between primaries, after a
// pause. A write is sent again after a failure that leaves its outcome
// open (a broken connection, a failed forward to the primary) only if it
// carries an identity: the partition then executes it at most once and
// answers the retry with the first attempt's result. Without one, such a
// failure ends the call with an UnknownOutcomeError that is not retryable.
// Once a write may have run (r.maybeRan), every error it ends with says
// so and carries its identity (request.outcome).
func (c *Client) call(ctx context.Context, r *request) (*service.Response, error) {
	var last error
	var spent attempts
	for {
		t, err := c.pick(ctx, r)
		if err != nil {
			if last != nil && errors.Is(err, nerr.ErrNoReplica) {
				// An identified write that may have run waits for the
				// excluded nodes to announce themselves again (maybeRan:
				// a write, so the identified write's budget).
				if r.maybeRan && r.identified() && ctx.Err() == nil {
					if d, next, ok := spent.wait(waitBudget(true, true)); ok && c.sleep(ctx, d) {
						spent = next
						continue
					}
				}
				err = fmt.Errorf("%w (after: %w)", err, last)
			}
			return nil, r.outcome(err)
		}
		c.identify(r)
		r.attempts++
		if r.span != nil {
			r.span.AddEvent("attempt", trace.WithAttributes(attribute.Int("neptune.attempt", r.attempts), attribute.String("neptune.replica", t.Node)))
			r.span.SetAttributes(attribute.String("neptune.replica", t.Node))
		}
		cl, err := c.conns.ClientFor(t.Node, t.RPCAddr)
		if err != nil {
			return nil, r.outcome(err)
		}
		sent := c.clock.Now()
		var grpcOpts []grpc.CallOption
		var trailer metadata.MD
		if r.usage != nil {
			grpcOpts = append(grpcOpts, grpc.Trailer(&trailer))
		}
		out, err := c.attempt(ctx, cl, r, t.Node, grpcOpts)
		t.done(c.clock.Now(), c.clock.Since(sent))
		if r.usage != nil {
			*r.usage, _ = transport.UsageFromTrailer(trailer)
		}
		if err == nil {
			return &service.Response{Body: out.Body, Version: out.Version}, nil
		}
		err = transport.FromStatus(t.Node, err)
		write := r.mode() == service.Write
		r.maybeRan = r.maybeRan || write && outcomeOpen(err)
		if ctx.Err() != nil {
			return nil, r.outcome(err)
		}
		last = err
		st, next := afterFailure(err, write, r.identified(), spent)
		if st.exclude {
			c.gossip.Exclude(t.Node)
		}
		if st.giveUp || st.pause > 0 && !c.sleep(ctx, st.pause) {
			return nil, r.outcome(err)
		}
		spent = next
		c.metrics.retries.Inc()
	}
}

// errPrimaryMoved ends an attempt sent to a primary that the yellow pages
// have since replaced (see attempt). It never leaves Call on its own.
var errPrimaryMoved = errors.New("the partition's primary changed while the call was out")

// attempt sends r to node. An attempt that went to a partition's primary
// and is safe to send twice (a read, or a write with an identity, which the
// partition executes at most once) is given up as soon as the yellow pages
// name another primary: a primary cut off by a partition or paused never
// answers, and waiting for the call's deadline would hold the write back
// long after a new primary took over (issue 14's resume goal).
func (c *Client) attempt(ctx context.Context, cl pb.NodeClient, r *request, node string, opts []grpc.CallOption) (*pb.CallResponse, error) {
	k := partKey{r.in.Service, r.in.Partition}
	c.mu.Lock()
	view, moved := c.views.of[k], c.views.moved
	c.mu.Unlock()
	if own, _ := view.primaryClaim(node); !own || view.level < 2 || !(r.mode() == service.Read || r.identified()) {
		return cl.Call(ctx, r.in, opts...)
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &moveWatch{c: c, k: k, node: node, cancel: cancel}
	w.arm(moved)
	defer w.disarm()
	out, err := cl.Call(actx, r.in, opts...)
	if errors.Is(context.Cause(actx), errPrimaryMoved) && ctx.Err() == nil {
		return nil, errPrimaryMoved
	}
	return out, err
}

// moveWatch gives up an attempt when the yellow pages name another
// primary for its partition. It waits on the views' moved context with
// context.AfterFunc, so the common case (no change while the call is out)
// starts no goroutine; each change re-arms it on the next moved context.
type moveWatch struct {
	c      *Client
	k      partKey
	node   string
	cancel context.CancelCauseFunc

	mu   sync.Mutex
	stop func() bool // unregisters the pending AfterFunc
	done bool
}

func (w *moveWatch) arm(moved context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.stop = context.AfterFunc(moved, w.recheck)
	}
}

// recheck runs on its own goroutine after a primary claim changed.
func (w *moveWatch) recheck() {
	w.c.mu.Lock()
	view, moved := w.c.views.of[w.k], w.c.views.moved
	w.c.mu.Unlock()
	if view.movedFrom(w.c.clock.Now(), w.node) {
		w.cancel(errPrimaryMoved)
		return
	}
	w.arm(moved)
}

func (w *moveWatch) disarm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.stop != nil {
		w.stop()
	}
}

// betweenPrimaries reports whether err says the partition has no primary
// right now, in a way that makes retrying safe: any read, and a write only
// when the replica answered so itself (not when forwarding it failed, in
// which case the old primary may have logged it).
func betweenPrimaries(err error, mode service.Mode) bool {
	noPrimary, noReplica := errors.Is(err, nerr.ErrNoPrimary), errors.Is(err, nerr.ErrNoReplica)
	if errors.Is(err, nerr.ErrUnknownOutcome) {
		return mode == service.Read
	}
	if mode == service.Read {
		return noPrimary || noReplica // a replica forwarding to a dead primary says the latter
	}
	return noPrimary && !noReplica
}

// outcomeOpen reports whether a write that failed with err may have run:
// the request may have arrived (transport failure, or an attempt given up
// for a new primary), the node says so, or the deadline passed while it
// was out.
func outcomeOpen(err error) bool {
	return transport.IsTransport(err) || errors.Is(err, nerr.ErrUnknownOutcome) || errors.Is(err, errPrimaryMoved) || errors.Is(err, nerr.ErrDeadline) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// Stream calls a read-only stream method; read the chunks with Recv. A
// session (WithSession) steers the choice of replica as for a read; the
// chunks carry no version to record.
func (c *Client) Stream(ctx context.Context, svc string, partition int, method string, body []byte, opts ...Option) (*Stream, error) {
	o := collect(opts)
	cancel := context.CancelFunc(func() {})
	if o.timeout > 0 {
		ctx, cancel = clock.WithTimeout(ctx, c.clock, o.timeout)
	}
	ctx, sp := c.startStream(ctx, "neptune.client.Stream", svc, partition, method)
	ctx, _ = obs.EnsureRequestID(ctx) // the node logs the stream's as a call's
	fail := func(err error) (*Stream, error) {
		cancel()
		sp.end(err)
		return nil, err
	}
	r := &request{in: &pb.CallRequest{Service: svc, Partition: int32(partition), Method: method, Body: body, Class: o.class}, stream: true, sess: o.session, affine: o.affine}
	t, err := c.pick(ctx, r)
	if err != nil {
		return fail(err)
	}
	sp.opened(t.Node)
	cl, err := c.conns.ClientFor(t.Node, t.RPCAddr)
	if err != nil {
		return fail(err)
	}
	s, err := cl.Stream(transport.DeclareSize(ctx, r.in), r.in)
	if err != nil {
		return fail(transport.FromStatus(t.Node, err))
	}
	sp.sentOne()
	return &Stream{recv: s.Recv, node: t.Node, done: cancel, span: sp}, nil
}

// Stream is the answer of a stream method.
type Stream struct {
	recv func() (*pb.Chunk, error)
	node string
	done context.CancelFunc // releases WithTimeout's timer
	span *streamSpan        // traced: ends with the last Recv
}

// Recv returns the next chunk, or io.EOF after the last one.
func (s *Stream) Recv() ([]byte, error) {
	ch, err := s.recv()
	if err == io.EOF {
		s.done()
		s.span.end(nil)
		return nil, io.EOF
	}
	if err != nil {
		s.done()
		err = transport.FromStatus(s.node, err)
		s.span.end(err)
		return nil, err
	}
	s.span.received()
	return ch.Body, nil
}
