package obs

import (
	"context"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// The request id crosses gRPC in metadata (MetaRequestID): the client's
// interceptors send the context's, the server's take it into the
// handler's context (a new one, NewRequestID, for a caller that sent none
// or an invalid one), so a call forwarded from node to node keeps it.

// UnaryClientInterceptor sends ctx's request id with the call.
func UnaryClientInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(outgoing(ctx), method, req, reply, cc, opts...)
}

// StreamClientInterceptor sends ctx's request id with the stream.
func StreamClientInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(outgoing(ctx), desc, cc, method, opts...)
}

func outgoing(ctx context.Context) context.Context {
	if id := RequestID(ctx); id != "" {
		return metadata.AppendToOutgoingContext(ctx, MetaRequestID, id)
	}
	return ctx
}

// UnaryServerInterceptor puts the caller's request id in the handler's
// context.
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(incoming(ctx), req)
}

// StreamServerInterceptor is UnaryServerInterceptor for streams.
func StreamServerInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &ridStream{ServerStream: ss, ctx: incoming(ss.Context())})
}

type ridStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ridStream) Context() context.Context { return s.ctx }

func incoming(ctx context.Context) context.Context {
	// ValueFromIncomingContext, not FromIncomingContext: no copy of the
	// whole metadata on every call.
	if vs := metadata.ValueFromIncomingContext(ctx, MetaRequestID); len(vs) > 0 && ValidRequestID(vs[0]) {
		return WithRequestID(ctx, vs[0])
	}
	return ctx
}

// ServerOptions are the request id's interceptors for a server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(UnaryServerInterceptor), grpc.ChainStreamInterceptor(StreamServerInterceptor)}
}

// DialOptions are the request id's interceptors for a dialer.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(UnaryClientInterceptor), grpc.WithChainStreamInterceptor(StreamClientInterceptor)}
}

// tracedRPC: only calls are traced (Call, the streams, a forward, which
// is a Call too, and an aggregation's Aggregate RPCs, one per subtree),
// never the replication batches, heartbeats and status RPCs, which are
// not a user's call and would each start a trace of their own.
func tracedRPC(info *stats.RPCTagInfo) bool {
	switch info.FullMethodName {
	case pb.Node_Call_FullMethodName, pb.Node_Stream_FullMethodName, pb.Node_BidiStream_FullMethodName, pb.Node_Aggregate_FullMethodName,
		pb.Node_AggregateStream_FullMethodName:
		return true
	}
	return false
}

// ClientHandler is the gRPC client's span per traced call (tracedRPC),
// with the W3C trace context sent in its metadata.
func ClientHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator),
		otelgrpc.WithMeterProvider(noopmetric.NewMeterProvider()), otelgrpc.WithFilter(tracedRPC))
}

// ServerHandler is the gRPC server's span per traced call, child of the
// caller's by the trace context in the metadata.
func ServerHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator),
		otelgrpc.WithMeterProvider(noopmetric.NewMeterProvider()), otelgrpc.WithFilter(tracedRPC))
}
