package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/obs"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// OpenStream opens a bidirectional stream with one replica of svc's
// partition, chosen by the balancer as for a Call (a write stream: the
// primary), running method, a stream method. Both sides then send
// messages until either ends the stream: Send and CloseSend here,
// Recv for the answers. gRPC's flow control holds a Send while the
// replica is not reading; a message over MaxMessageBytes is refused
// before it is sent. ctx (and WithTimeout) bound the whole stream;
// Close cancels it.
//
// On a Write stream method (replicated services), every message is a
// write identified by the stream's id and its sequence number, applied
// exactly once and in the order sent; Recv returns one answer per
// message, in order. A failure ends the stream with a
// *nerr.StreamOutcomeError saying which messages were applied. The
// stream is not moved to another replica when its replica fails: open
// it again (WithResume to keep a write stream's identity).
func (c *Client) OpenStream(ctx context.Context, svc string, partition int, method string, opts ...Option) (*BidiStream, error) {
	o := collect(opts)
	ctx, cancel := context.WithCancel(ctx)
	if o.timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = clock.WithTimeout(ctx, c.clock, o.timeout)
		parent := cancel
		cancel = func() { cancelT(); parent() }
	}
	ctx, sp := c.startStream(ctx, "neptune.client.OpenStream", svc, partition, method)
	ctx, _ = obs.EnsureRequestID(ctx) // the node logs the stream's as a call's
	r := &request{in: &pb.CallRequest{Service: svc, Partition: int32(partition), Method: method, Class: o.class}, stream: true, sess: o.session}
	s, err := c.openStream(ctx, r, o)
	if err != nil {
		cancel()
		sp.end(err)
		return nil, err
	}
	sp.opened(s.node)
	s.span, s.cancel = sp, cancel
	return s, nil
}

func (c *Client) openStream(ctx context.Context, r *request, o options) (*BidiStream, error) {
	t, err := c.pick(ctx, r)
	if err != nil {
		return nil, err
	}
	s := &BidiStream{node: t.Node, maxBody: c.maxBody, write: r.mode() == service.Write, sess: o.session, svc: r.in.Service, part: int(r.in.Partition)}
	if s.write {
		if o.resume != nil {
			r.in.ClientId, s.sent = o.resume.StreamID, o.resume.Applied
			s.applied, s.first = o.resume.Applied, o.resume.Applied+1
		} else {
			r.in.ClientId, s.first = c.clientID+"~s"+strconv.FormatUint(c.streamSeq.Add(1), 10), 1
		}
		s.id = r.in.ClientId
	}
	cl, err := c.conns.ClientFor(t.Node, t.RPCAddr)
	if err != nil {
		return nil, err
	}
	gs, err := cl.BidiStream(ctx)
	if err != nil {
		return nil, transport.FromStatus(t.Node, err)
	}
	s.gs = gs
	if err := gs.Send(&pb.StreamFrame{Open: r.in}); err != nil {
		_, err = gs.Recv() // the stream's status says why
		return nil, transport.FromStatus(t.Node, err)
	}
	return s, nil
}

// BidiStream is an open bidirectional stream (OpenStream). One goroutine
// may Send while another Recvs.
type BidiStream struct {
	gs      grpc.BidiStreamingClient[pb.StreamFrame, pb.StreamFrame]
	node    string
	maxBody int
	write   bool
	id      string // a write stream's identity
	first   uint64 // the first seq this stream sends
	cancel  context.CancelFunc
	span    *streamSpan // traced: ends with the stream

	sendMu sync.Mutex
	mu     sync.Mutex
	sent   uint64 // the last seq sent
	// applied is the last seq a write stream's node answered.
	applied uint64
	// sess (WithSession) records each answered write's version, so the
	// session's later reads see it (read your writes at level 2).
	sess *Session
	svc  string
	part int
	err  error // what ended the stream, once Recv saw it
}

// ID is a write stream's identity ("" for a read stream).
func (s *BidiStream) ID() string { return s.id }

// Node is the node the stream runs on.
func (s *BidiStream) Node() string { return s.node }

// Send sends one message. It blocks while the replica is not reading
// (flow control). A message over MaxMessageBytes fails with ErrTooLarge
// and is not sent; the stream goes on. Once the stream has ended, Send
// returns io.EOF and Recv the reason.
func (s *BidiStream) Send(body []byte) error {
	if len(body) > s.maxBody {
		return fmt.Errorf("%w: stream message of %d bytes exceeds the limit of %d (ClientConfig.MaxMessageBytes); it was not sent",
			nerr.ErrTooLarge, len(body), s.maxBody)
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	seq := s.sent + 1
	if s.sent < s.first {
		seq = s.first
	}
	s.sent = seq // counted before it leaves: it may be applied from now on
	s.mu.Unlock()
	err := s.gs.Send(&pb.StreamFrame{Body: body, Seq: seq})
	if err == nil {
		s.span.sentOne()
	}
	return err
}

// CloseSend tells the replica no more messages come; answers still
// arrive through Recv until it ends the stream.
func (s *BidiStream) CloseSend() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.gs.CloseSend()
}

// Close abandons the stream (its context ends); a write stream's messages
// not yet answered may or may not be applied.
func (s *BidiStream) Close() {
	s.cancel()
	s.span.end(nil)
}

// Recv returns the next answer, or io.EOF once the replica ended the
// stream after the caller's CloseSend. A write stream's answers come one
// per message, in order; its failure is a *nerr.StreamOutcomeError.
func (s *BidiStream) Recv() ([]byte, error) {
	f, err := s.RecvFrame()
	if err != nil {
		return nil, err
	}
	return f.Body, nil
}

// Frame is one answer of a stream: for a write stream, the seq of the
// message it answers and the version it was applied at.
type Frame struct {
	Body    []byte
	Seq     uint64
	Version uint64
}

// RecvFrame is Recv with a write stream's seq and version.
func (s *BidiStream) RecvFrame() (Frame, error) {
	f, err := s.gs.Recv()
	if err == nil {
		if s.write {
			s.mu.Lock()
			ok := f.Seq == s.applied+1 && f.Seq <= s.sent
			if ok {
				s.applied = f.Seq
			}
			s.mu.Unlock()
			if !ok {
				s.cancel()
				return Frame{}, s.end(fmt.Errorf("node %s answered message %d out of order (after %d): %w", s.node, f.Seq, s.applied, nerr.ErrBadRequest))
			}
		}
		s.sess.observe(s.svc, s.part, f.Version)
		s.span.received()
		return Frame{Body: f.Body, Seq: f.Seq, Version: f.Version}, nil
	}
	if err == io.EOF {
		s.cancel()
		s.span.end(nil)
		return Frame{}, io.EOF
	}
	s.cancel()
	return Frame{}, s.end(transport.FromStatus(s.node, err))
}

// Applied is how many of a write stream's messages were answered (the
// last answered seq).
func (s *BidiStream) Applied() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied
}

// end is the error the stream ends with: a write stream's says which of
// its messages were applied.
func (s *BidiStream) end(err error) (out error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.span.end(out) }()
	if s.err != nil {
		return s.err
	}
	if !s.write {
		s.err = err
		return err
	}
	e := &nerr.StreamOutcomeError{StreamID: s.id, Applied: s.applied, MaybeApplied: s.applied, Sent: s.sent, Cause: err}
	var remote *transport.RemoteError
	switch {
	case errors.As(err, &remote):
		// The handler's own error: message applied+1 ran, nothing after.
		e.HandlerFailed, e.MaybeApplied = true, min(s.applied+1, s.sent)
	case errors.Is(err, nerr.ErrUnknownOutcome):
		// The node's forward to the primary failed: that one message is
		// open; the node read none after it.
		e.MaybeApplied = min(s.applied+1, s.sent)
	case outcomeOpen(err):
		// Cut off: anything sent may have been applied.
		e.MaybeApplied = s.sent
	}
	s.err = e
	return e
}
