package transport

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Bounded memory under large writes (issue 28). A node's request bytes in
// flight are bounded by an Inflight budget, and a call the budget cannot
// take is refused before gRPC reads its body:
//
//   - every Neptune caller declares the encoded size of a request of 64
//     KiB or more (small) in the MetaRequestBytes header (DeclareSize;
//     the dial options' interceptor does it for every unary call);
//   - the server's tap (grpc.InTapHandle) runs when the call's headers
//     arrive, before gRPC reads a byte of its message, and reserves the
//     declared size. If the budget cannot take it, the call is answered
//     ErrOverloaded at once: nothing of it ran, and the body the caller
//     sends meanwhile is discarded by the transport as it arrives (never
//     queued: the stream is gone). A reservation is released when gRPC
//     finishes the call (its context ends), whatever the outcome;
//   - a call that declares nothing (a small one, or a caller that is not
//     Neptune's), or less than it sends, is charged the difference once
//     gRPC has read and decoded its message (the server interceptors),
//     and refused then if the budget cannot take it: that one message was
//     in memory for the moment between;
//   - a response of 64 KiB or more is charged once the handler returns
//     (never refused: the call has run) until gRPC ends the call, so
//     responses being sent hold new calls back;
//   - the bytes replication holds (Count) take up to half the budget.
//
// One call is always admitted when nothing else is held, so a budget
// smaller than one message cannot stop a node for good. The budget covers
// the calls users make (Call, Stream, Aggregate, AggregateStream, and BidiStream one
// message at a time: perMessage), including a write a
// replica forwards to its primary (a Call between nodes, charged at both:
// the forwarder still holds the original). Replication's own traffic
// (Replicate, InstallSnapshot) and the operator's calls are bounded by the
// replication runtime instead (its inboxes and peer queues), so a node
// full of client writes never refuses the heartbeats that keep its
// partitions' leases.

// MetaRequestBytes is the header in which a caller declares the encoded
// size of its request message, so the server can reserve it before
// reading it.
const MetaRequestBytes = "neptune-request-bytes"

// budgeted are the methods whose requests the budget covers.
var budgeted = map[string]bool{
	pb.Node_Call_FullMethodName:      true,
	pb.Node_Stream_FullMethodName:    true,
	pb.Node_Aggregate_FullMethodName: true,
	// AggregateStream: its one request, as Aggregate's.
	pb.Node_AggregateStream_FullMethodName: true,
}

// DeclareSize returns ctx with the MetaRequestBytes header of req added
// to its outgoing metadata, if req is not small.
func DeclareSize(ctx context.Context, req any) context.Context {
	m, ok := req.(proto.Message)
	if !ok {
		return ctx
	}
	n := proto.Size(m)
	if n < small {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, MetaRequestBytes, strconv.Itoa(n))
}

// declareSize is the dial options' interceptor: every unary call declares
// its request's size.
func declareSize(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(DeclareSize(ctx, req), method, req, reply, cc, opts...)
}

// Inflight is a node's budget of request bytes in flight
// (NodeConfig.MaxInflightBytes). It is safe for concurrent use.
type Inflight struct {
	node    string
	max     int64
	message int64 // the server's message limit
	used    atomic.Int64
	refused atomic.Int64
	// others, if set, is bytes the node holds outside its calls that the
	// budget also covers (replication's queues).
	others func() int64
}

// Count makes the budget also cover the bytes held reports (the node's
// replication queues), up to half of it: a call is admitted only if its
// bytes, the other calls' and held's fit. Set it before the server
// serves.
func (b *Inflight) Count(held func() int64) { b.others = held }

// held is the bytes others reports, counted against at most half the
// budget: a follower that lags or is cut off keeps its queue full until
// it catches up or leaves the yellow pages, and must not shut the node's
// calls out.
func (b *Inflight) held() int64 {
	if b.others == nil {
		return 0
	}
	return min(b.others(), b.max/2)
}

// NewInflight returns node's budget of max bytes for a server whose
// receive limit is message bytes (a call declaring more is left to that
// limit: ErrTooLarge, not a retryable refusal).
func NewInflight(node string, max int64, message int) *Inflight {
	return &Inflight{node: node, max: max, message: int64(message)}
}

// Used is the request (and response) bytes held now.
func (b *Inflight) Used() int64 { return b.used.Load() }

// Refused counts the calls refused for want of budget.
func (b *Inflight) Refused() int64 { return b.refused.Load() }

// Max is the budget.
func (b *Inflight) Max() int64 { return b.max }

// acquire reserves n more bytes for a call that holds own already: false
// if they would take the budget (with the bytes held elsewhere) over its
// maximum, unless no other call holds any.
func (b *Inflight) acquire(n, own int64) bool {
	for {
		u := b.used.Load()
		// held() counts at most max/2: ask it only when that could matter.
		if u-own > 0 && u+n > b.max-b.max/2 && u+n+b.held() > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// refusal is the error of a call refused for want of budget.
func (b *Inflight) refusal(n int64, when string) error {
	b.refused.Add(1)
	return fmt.Errorf("%w: node %s's in-flight request bytes are at their budget (NodeConfig.MaxInflightBytes %d; %d held by calls, %d by replication): a call of %d bytes was refused %s, so it never ran; retry later",
		nerr.ErrOverloaded, b.node, b.max, b.used.Load(), b.held(), n, when)
}

// reservation is one call's bytes, released when the call's context ends.
type reservation struct{ n atomic.Int64 }

type reservationKey struct{}

// ServerOptions are the tap and interceptors that enforce the budget.
func (b *Inflight) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(b.tap),
		grpc.ChainUnaryInterceptor(b.unary),
		grpc.ChainStreamInterceptor(b.stream),
	}
}

// tap reserves a budgeted call's declared size as its headers arrive,
// before its message is read; it runs on the connection's reader, so it
// never blocks.
func (b *Inflight) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !budgeted[info.FullMethodName] {
		return ctx, nil
	}
	var n int64
	for _, v := range info.Header.Get(MetaRequestBytes) {
		if d, err := strconv.ParseInt(v, 10, 64); err == nil && d > n {
			n = d
		}
	}
	if n > b.message || n <= 0 {
		// Undeclared: charged once read (unary, stream). Declared over
		// the message limit: gRPC refuses it by its length prefix.
		return ctx, nil
	}
	if !b.acquire(n, 0) {
		return nil, ToStatus(b.refusal(n, "before its body was read"))
	}
	r := &reservation{}
	r.n.Store(n)
	context.AfterFunc(ctx, func() { b.used.Add(-r.n.Load()) })
	return context.WithValue(ctx, reservationKey{}, r), nil
}

// small is the size under which a request is not declared and a
// response not charged: such a call is charged once read, and its bytes
// are nothing beside a budget, so it costs no header, no reservation and
// no work when it ends.
const small = 64 << 10

// charge makes the call's reservation (if any) cover its request of
// size bytes, now read: false if the budget cannot take the difference.
// Without a reservation it acquires size bytes, which the caller releases.
func (b *Inflight) charge(r *reservation, size int64) bool {
	if r == nil {
		return b.acquire(size, 0)
	}
	own := r.n.Load()
	if size <= own {
		return true
	}
	if !b.acquire(size-own, own) {
		return false
	}
	r.n.Add(size - own)
	return true
}

// late is the error of a request refused once read.
func (b *Inflight) late(r *reservation, size int64) error {
	declared := int64(0)
	if r != nil {
		declared = r.n.Load()
	}
	return ToStatus(b.refusal(size, "after it was read (its caller declared "+strconv.FormatInt(declared, 10)+" bytes)"))
}

func (b *Inflight) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, ok := req.(proto.Message)
	if !budgeted[info.FullMethod] || !ok {
		return handler(ctx, req)
	}
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	size := int64(proto.Size(m))
	if !b.charge(r, size) {
		return nil, b.late(r, size)
	}
	if r == nil {
		// Undeclared: its request is garbage once the handler returns.
		defer b.used.Add(-size)
	}
	resp, err := handler(ctx, req)
	if out, ok := resp.(proto.Message); ok && err == nil {
		// The response is held until gRPC has sent it: charged (never
		// refused: the call has run) until the call's context ends.
		if n := int64(proto.Size(out)); n >= small {
			b.used.Add(n)
			context.AfterFunc(ctx, func() { b.used.Add(-n) })
		}
	}
	return resp, err
}

func (b *Inflight) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if perMessage[info.FullMethod] {
		ms := &messageCharged{ServerStream: ss, b: b}
		defer ms.release()
		return handler(srv, ms)
	}
	if !budgeted[info.FullMethod] {
		return handler(srv, ss)
	}
	return handler(srv, &chargedStream{ServerStream: ss, b: b})
}

// perMessage are the streams whose messages the budget covers one at a
// time: a bidirectional stream may last for hours and carry any number of
// messages, so each is charged from when it is read until the next is
// asked for (its handler has dealt with it by then) or the stream ends.
var perMessage = map[string]bool{
	pb.Node_BidiStream_FullMethodName: true,
}

// messageCharged charges a bidirectional stream's last received message.
type messageCharged struct {
	grpc.ServerStream
	b    *Inflight
	mu   sync.Mutex
	held int64
}

func (s *messageCharged) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.used.Add(-s.held)
	s.held = 0
}

func (s *messageCharged) RecvMsg(m any) error {
	s.release()
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	msg, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	size := int64(proto.Size(msg))
	if !s.b.acquire(size, 0) {
		return ToStatus(s.b.refusal(size, "after it was read (a stream message; the stream ends, the message never ran)"))
	}
	s.mu.Lock()
	s.held = size
	s.mu.Unlock()
	return nil
}

// chargedStream charges a budgeted stream's request as it is received.
type chargedStream struct {
	grpc.ServerStream
	b *Inflight
}

func (s *chargedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	msg, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	ctx := s.Context()
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	size := int64(proto.Size(msg))
	if !s.b.charge(r, size) {
		return s.b.late(r, size)
	}
	if r == nil {
		context.AfterFunc(ctx, func() { s.b.used.Add(-size) })
	}
	return nil
}
