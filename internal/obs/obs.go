// Package obs is what ties one call's logs and traces together across the
// members that handle it: its request id (carried in the context, in gRPC
// metadata between members and in the X-Request-Id header at the gateway),
// the log handler that writes it on every line logged with that context,
// and the tracing switches (a TracerProvider injected, nothing done
// without one).
//
// One definition: a call's request id is the W3C trace id of its trace
// when the call is traced, so a log line and a span join on it; otherwise
// a fresh random id of the same form (32 lowercase hex digits). Only a
// request id a user sends the gateway (X-Request-Id) may take another form,
// and only one ValidRequestID accepts.
package obs

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"math/rand/v2"
)

// MetaRequestID is the gRPC metadata key of a call's request id, and
// HeaderRequestID the HTTP header the gateway reads and answers it in.
const (
	MetaRequestID   = "neptune-request-id"
	HeaderRequestID = "X-Request-Id"
)

// LogKey is the attribute a log line names the request id by.
const LogKey = "request_id"

type ridKey struct{}

// WithRequestID returns ctx carrying the request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ridKey{}, id)
}

// RequestID is ctx's request id, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(ridKey{}).(string)
	return id
}

// EnsureRequestID returns ctx with a request id: the one it has, else a
// new one (NewRequestID).
func EnsureRequestID(ctx context.Context) (context.Context, string) {
	if id := RequestID(ctx); id != "" {
		return ctx, id
	}
	id := NewRequestID(ctx)
	return WithRequestID(ctx, id), id
}

// NewRequestID is the request id of a call starting in ctx: the trace id
// of ctx's span if it has one, else random.
func NewRequestID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	var raw [16]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(raw[8:], rand.Uint64())
	var b [32]byte
	hex.Encode(b[:], raw[:])
	return string(b[:])
}

// maxRequestID bounds a request id a peer or user sends.
const maxRequestID = 64

// ValidRequestID reports whether s may be taken as a request id from a
// peer or a user: 1 to 64 letters, digits, '-', '_' or '.' (a UUID, a
// trace id, most load balancers' ids), nothing that could forge a log
// line or a header.
func ValidRequestID(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// Logger returns log writing the request id of the context a line is
// logged with (the *Context methods) as LogKey; log itself if it does
// already, or if it is nil.
func Logger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return nil
	}
	if _, ok := log.Handler().(ridHandler); ok {
		return log
	}
	return slog.New(ridHandler{log.Handler()})
}

// ridHandler adds the context's request id to each record.
type ridHandler struct{ slog.Handler }

func (h ridHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String(LogKey, id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h ridHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return ridHandler{h.Handler.WithAttrs(as)}
}

func (h ridHandler) WithGroup(name string) slog.Handler {
	return ridHandler{h.Handler.WithGroup(name)}
}

// Propagator is the one trace context format Neptune speaks, on gRPC
// and HTTP: W3C Trace Context (traceparent, tracestate).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Tracer is tp's tracer for Neptune's spans, or nil when tp is nil:
// tracing off, and the call paths then start no span at all (not even a
// no-op one), so it costs nothing.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(TracerName)
}

// TracerName is the instrumentation scope of Neptune's spans.
const TracerName = "github.com/neptune-cluster/neptune"

// Error is a failed call's error naming its request id, the one the
// logs of every member that handled the call carry: what an operator
// greps for.
type Error struct {
	ID  string
	Err error
}

func (e *Error) Error() string { return e.Err.Error() + " (request_id " + e.ID + ")" }
func (e *Error) Unwrap() error { return e.Err }

// RequestIDOf is the request id err names (an *Error in its chain), or "".
func RequestIDOf(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.ID
	}
	return ""
}
