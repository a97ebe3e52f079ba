package replication

import (
	"context"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/neptune-cluster/neptune/internal/obs"
	"github.com/neptune-cluster/neptune/internal/replica"
)

// Tracing a write (Config.Tracer): the caller's goroutine holds the span
// of the whole write (neptune.replication.write); the partition's loop,
// which batches writes, adds its stages as children, timed by the loop:
//
//	neptune.replication.append     proposed → durable in the local log
//	neptune.replication.replicate  durable → committed (a majority has it)
//	neptune.replication.commit     executing the committed write; the
//	                               handler's span is its child
//
// Only writes proposed here by a traced call are timed. Untraced, the
// loop only keeps a write's request id, so the handler of a write proposed
// here logs it (obs.RequestID of its context).

// tracedWrite is what the loop keeps of a write's call: its request id
// and, traced, the context of its write span and the times of its stages;
// owned by the loop once proposed.
type tracedWrite struct {
	rid                string
	ctx                context.Context // nil: not traced
	proposed, appended time.Time
}

// startWrite starts a write's span if the runtime traces. tw is nil for
// an untraced call without a request id.
func (p *part) startWrite(ctx context.Context) (context.Context, trace.Span, *tracedWrite) {
	t := p.rt.cfg.Tracer
	if t == nil {
		if rid := obs.RequestID(ctx); rid != "" {
			return ctx, nil, &tracedWrite{rid: rid}
		}
		return ctx, nil, nil
	}
	ctx, span := t.Start(ctx, "neptune.replication.write", trace.WithAttributes(
		attribute.String("neptune.service", p.key.service), attribute.Int("neptune.partition", int(p.key.partition))))
	return ctx, span, &tracedWrite{rid: obs.RequestID(ctx), ctx: ctx}
}

// stage records a finished stage of tw as a span from start to end.
func (p *part) stage(tw *tracedWrite, name string, start, end time.Time, attrs ...attribute.KeyValue) {
	_, s := p.rt.cfg.Tracer.Start(tw.ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	s.End(trace.WithTimestamp(end))
}

// tracedAppended closes the append stage of the traced writes among es,
// just made durable.
func (p *part) tracedAppended(es []replica.Entry) {
	if len(p.traced) == 0 {
		return
	}
	now := p.rt.clock.Now()
	for _, e := range es {
		if tw := p.traced[e.ReqID]; tw != nil && tw.ctx != nil && e.Origin == replica.ID(p.rt.cfg.Self) && tw.appended.IsZero() {
			tw.appended = now
			p.stage(tw, "neptune.replication.append", tw.proposed, now, attribute.Int64("neptune.lsn", int64(e.LSN)))
		}
	}
}

// tracedCommit is the context to execute e in: for a write proposed here,
// ctx with its request id and, traced, its commit span (the replicate
// stage closed first), and the span to end once it ran; ctx and nil for
// another.
func (p *part) tracedCommit(ctx context.Context, e replica.Entry) (context.Context, trace.Span) {
	if len(p.traced) == 0 || e.Origin != replica.ID(p.rt.cfg.Self) {
		return ctx, nil
	}
	tw := p.traced[e.ReqID]
	if tw == nil {
		return ctx, nil
	}
	delete(p.traced, e.ReqID)
	if tw.rid != "" {
		ctx = obs.WithRequestID(ctx, tw.rid)
	}
	if tw.ctx == nil {
		return ctx, nil
	}
	now := p.rt.clock.Now()
	if !tw.appended.IsZero() {
		p.stage(tw, "neptune.replication.replicate", tw.appended, now, attribute.Int64("neptune.lsn", int64(e.LSN)))
	}
	sctx, span := p.rt.cfg.Tracer.Start(tw.ctx, "neptune.replication.commit", trace.WithAttributes(attribute.Int64("neptune.lsn", int64(e.LSN))))
	// The handler runs under the loop's context (its cancellation), in
	// the commit span.
	return trace.ContextWithSpan(ctx, trace.SpanFromContext(sctx)), span
}

// endSpan ends span, recording err if the write failed.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
