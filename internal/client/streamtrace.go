package client

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// streamSpan is a traced stream's span (Stream, OpenStream), from its
// opening to its end (its last Recv, an error, or Close), counting the
// messages each way. A nil *streamSpan (tracing off) does nothing.
type streamSpan struct {
	span       trace.Span
	sent, recv atomic.Int64
	once       sync.Once
}

// startStream starts the span of a stream named name on svc's partition,
// nil when the client does not trace.
func (c *Client) startStream(ctx context.Context, name, svc string, partition int, method string) (context.Context, *streamSpan) {
	if c.tracer == nil {
		return ctx, nil
	}
	ctx, span := c.tracer.Start(ctx, name, trace.WithAttributes(
		attribute.String("neptune.service", svc), attribute.Int("neptune.partition", partition), attribute.String("neptune.method", method)))
	return ctx, &streamSpan{span: span}
}

// opened records the replica the stream runs on.
func (s *streamSpan) opened(node string) {
	if s != nil {
		s.span.SetAttributes(attribute.String("neptune.replica", node))
	}
}

func (s *streamSpan) sentOne() {
	if s != nil {
		s.sent.Add(1)
	}
}

func (s *streamSpan) received() {
	if s != nil {
		s.recv.Add(1)
	}
}

// end ends the span once, with the message counts and err if the stream
// failed.
func (s *streamSpan) end(err error) {
	if s == nil {
		return
	}
	s.once.Do(func() {
		s.span.SetAttributes(attribute.Int64("neptune.stream.sent", s.sent.Load()), attribute.Int64("neptune.stream.received", s.recv.Load()))
		if err != nil {
			s.span.RecordError(err)
			s.span.SetStatus(codes.Error, err.Error())
		}
		s.span.End()
	})
}
