package node

import (
	"context"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"log/slog"
	"time"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/obs"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// nodeServer adapts the node to the generated gRPC interface.
type nodeServer struct {
	pb.UnimplementedNodeServer
	n *Node
}

func (s *nodeServer) Call(ctx context.Context, in *pb.CallRequest) (*pb.CallResponse, error) {
	start := s.n.clock.Now()
	ctx, _ = obs.EnsureRequestID(ctx) // the caller's (metadata), else new
	var acc *reqUsage
	if transport.SubscriberOf(ctx) != "" {
		acc = &reqUsage{}
		ctx = withReqUsage(ctx, acc)
	}
	resp, err := s.n.serveBounded(ctx, in)
	s.n.observe(in, start, err)
	s.n.logCall(ctx, "call served", in, err)
	var out *pb.CallResponse
	if err == nil {
		out = &pb.CallResponse{Body: resp.Body, Version: resp.Version}
	}
	if acc != nil {
		s.n.reportUsage(ctx, in, out, acc)
	}
	if err != nil {
		return nil, transport.ToStatus(err)
	}
	return out, nil
}

// reportUsage completes a measured request's usage with its network
// bytes, counts it in the accounting cycle and sends it back in the
// call's trailer (with the node's last cycle), failed calls included.
func (n *Node) reportUsage(ctx context.Context, in *pb.CallRequest, out *pb.CallResponse, acc *reqUsage) {
	u := acc.get()
	u.NetIn += int64(proto.Size(in))
	if out != nil {
		u.NetOut += int64(proto.Size(out))
	}
	n.acct.add(u)
	cu := service.CallUsage{Node: n.cfg.ID, Usage: u, Load: n.acct.load()}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(transport.MetaUsage, transport.EncodeUsage(cu)))
}

func (s *nodeServer) Stream(in *pb.CallRequest, stream grpc.ServerStreamingServer[pb.Chunk]) error {
	start := s.n.clock.Now()
	ctx, _ := obs.EnsureRequestID(stream.Context())
	var sent int64
	err := s.n.serveStream(ctx, in, func(b []byte) error {
		err := stream.Send(&pb.Chunk{Body: b})
		if err == nil {
			sent++
		}
		return err
	})
	s.n.streamCounts(ctx, 1, sent)
	s.n.observe(in, start, err)
	s.n.logCall(ctx, "stream served", in, err)
	return transport.ToStatus(err)
}

// streamCounts records on a traced stream's server span how many
// messages it received and sent.
func (n *Node) streamCounts(ctx context.Context, received, sent int64) {
	if n.tracer != nil {
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int64("neptune.stream.received", received), attribute.Int64("neptune.stream.sent", sent))
	}
}

// logCall logs a call at debug level with its request id (from ctx),
// building the line only if it is logged: calls are the hot path.
func (n *Node) logCall(ctx context.Context, msg string, in *pb.CallRequest, err error) {
	if !n.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	args := []any{"service", in.Service, "partition", in.Partition, "method", in.Method}
	if err != nil {
		args = append(args, "err", err)
	}
	n.log.DebugContext(ctx, msg, args...)
}

// Replicate receives replication messages from another node.
func (s *nodeServer) Replicate(_ context.Context, in *pb.ReplicaBatch) (*pb.ReplicaBatchAck, error) {
	if s.n.repl == nil {
		return nil, transport.ToStatus(fmt.Errorf("%w: node %s hosts no replicated service", nerr.ErrUnknownService, s.n.cfg.ID))
	}
	if err := s.n.repl.Replicate(in); err != nil {
		return nil, transport.ToStatus(err)
	}
	return &pb.ReplicaBatchAck{}, nil
}

// InstallSnapshot receives a snapshot of a replicated partition from its
// primary's node.
func (s *nodeServer) InstallSnapshot(stream grpc.ClientStreamingServer[pb.SnapshotChunk, pb.SnapshotAck]) error {
	if s.n.repl == nil {
		return transport.ToStatus(fmt.Errorf("%w: node %s hosts no replicated service", nerr.ErrUnknownService, s.n.cfg.ID))
	}
	ack, err := s.n.repl.InstallSnapshot(stream.Context(), stream.Recv)
	if err != nil {
		return transport.ToStatus(err)
	}
	return stream.SendAndClose(ack)
}

// Promote is the operator's `neptune partition promote`.
func (s *nodeServer) Promote(ctx context.Context, in *pb.PromoteRequest) (*pb.PromoteReply, error) {
	if s.n.repl == nil {
		return nil, transport.ToStatus(fmt.Errorf("%w %d of replicated service %q on node %s", nerr.ErrUnknownPartition, in.Partition, in.Service, s.n.cfg.ID))
	}
	st, err := s.n.repl.Promote(ctx, in.Service, in.Partition, in.Force)
	if err != nil {
		return nil, transport.ToStatus(err)
	}
	return &pb.PromoteReply{Status: st}, nil
}

// Drain is the operator's `neptune node drain`: it answers once this
// node's primary roles are handed over, then finishes its calls in flight
// and stops (Node.Drain).
func (s *nodeServer) Drain(context.Context, *pb.DrainRequest) (*pb.DrainReply, error) {
	return &pb.DrainReply{Kept: s.n.drainRemote()}, nil
}

// ChangeReplicas is the operator's `neptune partition add|remove|move`,
// at the partition's primary.
func (s *nodeServer) ChangeReplicas(ctx context.Context, in *pb.ChangeReplicasRequest) (*pb.ChangeReplicasReply, error) {
	if s.n.repl == nil {
		return nil, transport.ToStatus(fmt.Errorf("%w %d of replicated service %q on node %s", nerr.ErrUnknownPartition, in.Partition, in.Service, s.n.cfg.ID))
	}
	out, err := s.n.repl.ChangeReplicas(ctx, in.Service, in.Partition,
		replica.Change{Add: replica.ID(in.Add), Priority: int(in.Priority), Remove: replica.ID(in.Remove),
			Expect: expectIDs(in.Expect), SetPriority: in.SetPriority})
	if err != nil {
		return nil, transport.ToStatus(err)
	}
	return out, nil
}

// expectIDs is a request's expected replica set (nil: none expected).
func expectIDs(ids []string) []replica.ID {
	if len(ids) == 0 {
		return nil
	}
	out := make([]replica.ID, len(ids))
	for i, id := range ids {
		out[i] = replica.ID(id)
	}
	return out
}

// Aggregate runs this node's part of an aggregation.
func (s *nodeServer) Aggregate(ctx context.Context, in *pb.AggregateRequest) (*pb.AggregateResponse, error) {
	resp, err := s.n.agg.Serve(ctx, in)
	if err != nil {
		return nil, transport.ToStatus(err)
	}
	return resp, nil
}

// AggregateStream runs this node's part of an aggregation at the top of
// a streaming one: progress frames, then the final one.
func (s *nodeServer) AggregateStream(in *pb.AggregateRequest, stream pb.Node_AggregateStreamServer) error {
	if err := s.n.agg.ServeStream(stream.Context(), in, stream.Send); err != nil {
		return transport.ToStatus(err)
	}
	return nil
}

func (n *Node) observe(in *pb.CallRequest, start time.Time, err error) {
	n.metrics.calls.WithLabelValues(in.Service, in.Method, nerr.Label(err)).Inc()
	n.metrics.latency.WithLabelValues(in.Service, in.Method).Observe(n.clock.Since(start).Seconds())
}
