package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
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
}

func (r *request) mode() service.Mode { return service.Mode(r.in.Mode) }

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
// failed node is excluded until it announces itself again.
func (c *Client) Call(ctx context.Context, svc string, partition int, method string, body []byte, opts ...Option) (*service.Response, error) {
	o := collect(opts)
	start := c.clock.Now()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = clock.WithTimeout(ctx, c.clock, o.timeout)
		defer cancel()
	}
	r := &request{in: &pb.CallRequest{Service: svc, Partition: int32(partition), Method: method, Body: body, Class: o.class}, sess: o.session, usage: o.usage}
	resp, err := c.call(ctx, r)
	c.metrics.calls.WithLabelValues(svc, method, nerr.Label(err)).Inc()
	c.metrics.latency.WithLabelValues(svc, method).Observe(c.clock.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	o.session.observe(svc, partition, resp.Version)
	return resp, nil
}

// call sends r to the replica pick chooses, and again to another after a
// transport failure or, while the partition is between primaries, after a
// pause.
func (c *Client) call(ctx context.Context, r *request) (*service.Response, error) {
	var last error
	failed, waited := 0, time.Duration(0)
	for {
		t, err := c.pick(ctx, r)
		if err != nil {
			if last != nil && errors.Is(err, nerr.ErrNoReplica) {
				return nil, fmt.Errorf("%w (after: %w)", err, last)
			}
			return nil, err
		}
		cl, err := c.conns.Client(t.RPCAddr)
		if err != nil {
			return nil, err
		}
		sent := c.clock.Now()
		var grpcOpts []grpc.CallOption
		var trailer metadata.MD
		if r.usage != nil {
			grpcOpts = append(grpcOpts, grpc.Trailer(&trailer))
		}
		out, err := cl.Call(ctx, r.in, grpcOpts...)
		t.done(c.clock.Now(), c.clock.Since(sent))
		if r.usage != nil {
			*r.usage, _ = transport.UsageFromTrailer(trailer)
		}
		if err == nil {
			return &service.Response{Body: out.Body, Version: out.Version}, nil
		}
		err = transport.FromStatus(t.Node, err)
		if ctx.Err() != nil {
			return nil, err
		}
		last = err
		switch {
		case transport.IsTransport(err):
			// The node is unreachable: exclude it and try another replica.
			c.gossip.Exclude(t.Node)
			if failed++; failed >= maxAttempts {
				return nil, err
			}
		case betweenPrimaries(err, r.mode()) && waited < maxPrimaryWait:
			// The partition is electing a primary (a write that gets this
			// answer never ran): wait a little, then ask again.
			pause := min(primaryRetryPause<<min(failed+int(waited/primaryRetryPause), 3), maxPrimaryWait-waited)
			select {
			case <-ctx.Done():
				return nil, err
			case <-c.clock.After(pause):
			}
			waited += pause
		default:
			return nil, err
		}
		c.metrics.retries.Inc()
	}
}

// A call that meets a partition between primaries retries for at most
// maxPrimaryWait (failover takes well under a second), pausing
// primaryRetryPause, doubling, between tries.
const (
	maxPrimaryWait    = 2 * time.Second
	primaryRetryPause = 25 * time.Millisecond
)

// betweenPrimaries reports whether err says the partition has no primary
// right now, in a way that makes retrying safe: any read, and a write only
// when the replica answered so itself (not when forwarding it failed, in
// which case the old primary may have logged it).
func betweenPrimaries(err error, mode service.Mode) bool {
	noPrimary, noReplica := errors.Is(err, nerr.ErrNoPrimary), errors.Is(err, nerr.ErrNoReplica)
	if mode == service.Read {
		return noPrimary || noReplica // a replica forwarding to a dead primary says the latter
	}
	return noPrimary && !noReplica
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
	r := &request{in: &pb.CallRequest{Service: svc, Partition: int32(partition), Method: method, Body: body, Class: o.class}, stream: true, sess: o.session}
	t, err := c.pick(ctx, r)
	if err != nil {
		cancel()
		return nil, err
	}
	cl, err := c.conns.Client(t.RPCAddr)
	if err != nil {
		cancel()
		return nil, err
	}
	s, err := cl.Stream(ctx, r.in)
	if err != nil {
		cancel()
		return nil, transport.FromStatus(t.Node, err)
	}
	return &Stream{recv: s.Recv, node: t.Node, done: cancel}, nil
}

// Stream is the answer of a stream method.
type Stream struct {
	recv func() (*pb.Chunk, error)
	node string
	done context.CancelFunc // releases WithTimeout's timer
}

// Recv returns the next chunk, or io.EOF after the last one.
func (s *Stream) Recv() ([]byte, error) {
	ch, err := s.recv()
	if err == io.EOF {
		s.done()
		return nil, io.EOF
	}
	if err != nil {
		s.done()
		return nil, transport.FromStatus(s.node, err)
	}
	return ch.Body, nil
}
