package aggregation

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing an aggregation (Config.Tracer, ServerConfig.Tracer): the
// caller's span covers the whole call (planning, polls, the tree's
// answer); each node's part is a span under the server span of its
// Aggregate RPC, with a span per local operator and per reduction it ran
// and the client spans of the subtrees it forwarded. The W3C trace
// context crosses every Aggregate RPC (internal/obs), so one call is one
// trace however deep its tree. Without a tracer nothing here runs.
//
//	neptune.client.Aggregate
//	└ neptune.v1.Node/Aggregate (client) → (server)
//	  └ neptune.aggregate.node
//	    ├ neptune.aggregate.local, neptune.aggregate.reduce …
//	    └ neptune.v1.Node/Aggregate (a child's subtree) …

// callSpan is the caller's span of one aggregation; a nil *callSpan
// (tracing off) does nothing.
type callSpan struct{ span trace.Span }

// startCall starts a's span.
func (c *Caller) startCall(ctx context.Context, a Aggregation) (context.Context, *callSpan) {
	ctx, span := c.cfg.Tracer.Start(ctx, "neptune.client.Aggregate", trace.WithAttributes(
		attribute.String("neptune.service", a.Service), attribute.Int("neptune.partitions", len(a.Partitions)),
		attribute.String("neptune.scheme", a.Scheme.String()), attribute.String("neptune.local", a.Local),
		attribute.String("neptune.reduce", a.Reduce), attribute.Int64("neptune.deadline_ms", a.Deadline.Milliseconds())))
	return ctx, &callSpan{span: span}
}

// planned records the call's id, how many partitions take part (those
// with a live replica) and how many nodes were polled afresh.
func (s *callSpan) planned(id string, participants, polls int) {
	if s == nil {
		return
	}
	s.span.SetAttributes(attribute.String("neptune.call_id", id), attribute.Int("neptune.participants", participants),
		attribute.Int("neptune.polls", polls))
}

// end records the call's outcome and ends its span.
func (s *callSpan) end(res *Result, err error) {
	if res != nil {
		s.span.SetAttributes(attribute.String("neptune.status", res.Status.String()), attribute.Int("neptune.contributing", len(res.Contributing)),
			attribute.Float64("neptune.coverage", res.Coverage), attribute.Int("neptune.hedges", res.Hedges))
	}
	endSpan(s.span, err)
}

// startNode starts the span of this node's part of c's call, nil when
// not traced.
func (s *Server) startNode(ctx context.Context, c *call) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attribute.String("neptune.service", c.in.Service), attribute.String("neptune.call_id", c.in.CallId),
		attribute.Int("neptune.participant", int(c.in.Self)), attribute.Int("neptune.children", len(c.children))}
	if c.cfg.Local {
		attrs = append(attrs, attribute.Int("neptune.partition", c.cfg.Partition))
	}
	return s.tracer.Start(ctx, "neptune.aggregate.node", trace.WithAttributes(attrs...))
}

// startOp starts the span of an operator this node runs (name), from
// when it holds a worker to when it returns; ctx and nil when not traced.
func (s *Server) startOp(ctx context.Context, name string, partition int) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, nil
	}
	var opts []trace.SpanStartOption
	if partition >= 0 {
		opts = append(opts, trace.WithAttributes(attribute.Int("neptune.partition", partition)))
	}
	return s.tracer.Start(ctx, name, opts...)
}

// endSpan ends span, recording err if the call failed; nothing for a
// nil span (not traced).
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
