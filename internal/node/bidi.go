package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// BidiStream serves a bidirectional stream (Client.OpenStream): the
// first frame names the call, the rest are its messages.
func (s *nodeServer) BidiStream(stream grpc.BidiStreamingServer[pb.StreamFrame, pb.StreamFrame]) error {
	start := s.n.clock.Now()
	first, err := stream.Recv()
	if err != nil && err != io.EOF {
		return transport.ToStatus(err)
	}
	if err == io.EOF || first.Open == nil {
		return transport.ToStatus(fmt.Errorf("%w: a stream's first frame must name the call (open)", nerr.ErrBadRequest))
	}
	var received, sent atomic.Int64 // the handler may send and receive from two goroutines
	recv := func() (*pb.StreamFrame, error) {
		f, err := stream.Recv()
		if err == nil {
			received.Add(1)
		}
		return f, err
	}
	send := func(f *pb.StreamFrame) error {
		err := stream.Send(f)
		if err == nil {
			sent.Add(1)
		}
		return err
	}
	err = s.n.serveBidi(stream.Context(), first.Open, recv, send)
	s.n.streamCounts(stream.Context(), received.Load(), sent.Load())
	s.n.observe(first.Open, start, err)
	return transport.ToStatus(err)
}

// serveBidi runs the stream call in, reading its frames with recv and
// answering with send. A read stream runs the method's handler once, on
// one worker, for the whole stream; a write stream sends each message
// through the partition's replicated write path, one after another in seq
// order, and answers each once it is applied. The first failure ends the
// stream: messages after it are never read, so never run.
func (n *Node) serveBidi(ctx context.Context, in *pb.CallRequest, recv func() (*pb.StreamFrame, error), send func(*pb.StreamFrame) error) error {
	h, m, err := n.lookup(in.Service, in.Partition, in.Method, service.Mode(in.Mode))
	if err != nil {
		return err
	}
	if m.Stream == nil {
		return fmt.Errorf("%w: %s.%s is not a stream method; use Client.Call", nerr.ErrWrongMode, in.Service, in.Method)
	}
	fs := &frames{recv: recv, send: send, max: n.cfg.MaxMessageBytes, node: n.cfg.ID}
	if m.Mode == service.Write {
		return n.serveWriteStream(ctx, in, fs)
	}
	var herr error
	if err := h.run(ctx, in.Class, in.Method, func(ctx context.Context) *service.Response {
		defer recoverInto(&herr)
		herr = m.Stream(ctx, toRequest(in), fs)
		return nil
	}); err != nil {
		return err
	}
	if err := fs.failed(); err != nil {
		return err // a bad frame ends the stream whatever the handler made of it
	}
	return herr
}

// serveWriteStream applies each message of a write stream as a write
// identified by the stream's id and the message's seq (replication
// executes an identity at most once), in order, answering each with its
// seq and version once applied.
func (n *Node) serveWriteStream(ctx context.Context, in *pb.CallRequest, fs *frames) error {
	if in.ClientId == "" {
		return fmt.Errorf("%w: write stream %s.%s names no stream identity (open.client_id)", nerr.ErrBadRequest, in.Service, in.Method)
	}
	for {
		f, err := fs.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		w := &pb.CallRequest{Service: in.Service, Partition: in.Partition, Method: in.Method, Mode: pb.Mode_MODE_WRITE,
			Body: f.Body, Class: in.Class, ClientId: in.ClientId, Seq: f.Seq}
		resp, err := n.serveBounded(ctx, w)
		if err != nil {
			return fmt.Errorf("message %d of write stream %s: %w", f.Seq, in.ClientId, err)
		}
		fs.sendMu.Lock()
		err = fs.send(&pb.StreamFrame{Seq: f.Seq, Body: resp.Body, Version: resp.Version})
		fs.sendMu.Unlock()
		if err != nil {
			return err
		}
	}
}

// frames is a stream's frames as a handler's service.ServerStream: it
// checks every frame a peer sends (no second open, the message limit, seq
// numbers 1, 2, 3, ... or, for a write stream, consecutive from the
// first) and remembers the first bad one, which ends the stream.
type frames struct {
	recv func() (*pb.StreamFrame, error)
	send func(*pb.StreamFrame) error
	max  int
	node string

	recvMu sync.Mutex // one receiver at a time; guards seq
	seq    uint64     // the last message's seq
	sendMu sync.Mutex // one sender at a time
	badMu  sync.Mutex
	bad    error
}

func (fs *frames) failed() error {
	fs.badMu.Lock()
	defer fs.badMu.Unlock()
	return fs.bad
}

func (fs *frames) fail(err error) error {
	fs.badMu.Lock()
	defer fs.badMu.Unlock()
	if fs.bad == nil {
		fs.bad = err
	}
	return fs.bad
}

// next returns the next frame, checked; io.EOF once the caller closed its side.
func (fs *frames) next() (*pb.StreamFrame, error) {
	fs.recvMu.Lock()
	defer fs.recvMu.Unlock()
	if err := fs.failed(); err != nil {
		return nil, err
	}
	f, err := fs.recv()
	if err != nil {
		return nil, err
	}
	switch {
	case f.Open != nil:
		return nil, fs.fail(fmt.Errorf("%w: frame after the first names a call again (open)", nerr.ErrBadRequest))
	case len(f.Body) > fs.max:
		return nil, fs.fail(fmt.Errorf("%w: stream message %d of %d bytes exceeds node %s's limit of %d (NodeConfig.MaxMessageBytes); it never ran",
			nerr.ErrTooLarge, f.Seq, len(f.Body), fs.node, fs.max))
	case f.Seq == 0 || (fs.seq != 0 && f.Seq != fs.seq+1):
		return nil, fs.fail(fmt.Errorf("%w: stream message numbered %d after %d (seq must count 1, 2, 3, ...)", nerr.ErrBadRequest, f.Seq, fs.seq))
	}
	fs.seq = f.Seq
	return f, nil
}

// Recv implements service.ServerStream.
func (fs *frames) Recv() ([]byte, error) {
	f, err := fs.next()
	if err != nil {
		return nil, err
	}
	return f.Body, nil
}

// Send implements service.ServerStream.
func (fs *frames) Send(b []byte) error {
	if len(b) > fs.max {
		return fmt.Errorf("%w: stream message of %d bytes exceeds node %s's limit of %d (NodeConfig.MaxMessageBytes); not sent",
			nerr.ErrTooLarge, len(b), fs.node, fs.max)
	}
	fs.sendMu.Lock()
	defer fs.sendMu.Unlock()
	return fs.send(&pb.StreamFrame{Body: b})
}

// oneMessage is the stream a write stream's handler runs on for one
// message: Recv yields it, then io.EOF; the first Send is its answer.
type oneMessage struct {
	body   []byte
	read   bool
	answer []byte
	sent   bool
}

func (o *oneMessage) Recv() ([]byte, error) {
	if o.read {
		return nil, io.EOF
	}
	o.read = true
	return o.body, nil
}

func (o *oneMessage) Send(b []byte) error {
	if o.sent {
		return errors.New("neptune: a write stream's handler answers each message with at most one Send")
	}
	o.answer, o.sent = b, true
	return nil
}

// messageHandler is the Handler that runs a write stream's handler for
// one message, the write it is (served, logged and replayed like a
// Call's).
func messageHandler(f service.StreamHandler) service.Handler {
	return func(ctx context.Context, req *service.Request) (*service.Response, error) {
		s := &oneMessage{body: req.Body}
		if err := f(ctx, req, s); err != nil {
			return nil, err
		}
		return &service.Response{Body: s.answer}, nil
	}
}

// sendOnly is the stream of a Client.Stream call: the request is its one
// message (Request.Body), so Recv ends at once.
type sendOnly func([]byte) error

func (s sendOnly) Recv() ([]byte, error) { return nil, io.EOF }
func (s sendOnly) Send(b []byte) error   { return s(b) }
