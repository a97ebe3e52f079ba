package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

func TestRequestIDIsTheTraceIDWhenTraced(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	if got := NewRequestID(ctx); got != tid.String() {
		t.Errorf("traced: request id %s, want the trace id %s", got, tid)
	}
	a, b := NewRequestID(context.Background()), NewRequestID(context.Background())
	if a == b || len(a) != 32 || !ValidRequestID(a) {
		t.Errorf("untraced ids %q, %q: want two different valid 32-hex ids", a, b)
	}
	ctx, id := EnsureRequestID(WithRequestID(context.Background(), "given"))
	if id != "given" || RequestID(ctx) != "given" {
		t.Errorf("EnsureRequestID replaced the id the context had: %q", id)
	}
}

func TestLoggerWritesTheRequestID(t *testing.T) {
	var buf bytes.Buffer
	log := Logger(slog.New(slog.NewJSONHandler(&buf, nil))).With("node", "n1")
	if Logger(log) != log {
		t.Error("Logger wrapped a logger that writes request ids already")
	}
	log.InfoContext(WithRequestID(context.Background(), "r-1"), "served")
	log.Info("no context")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var first, second map[string]any
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &first) != nil || json.Unmarshal([]byte(lines[1]), &second) != nil {
		t.Fatalf("log: %q", buf.String())
	}
	if first[LogKey] != "r-1" || first["node"] != "n1" {
		t.Errorf("line with a request id: %v", first)
	}
	if _, ok := second[LogKey]; ok {
		t.Errorf("line without one names one: %v", second)
	}
}

func TestInterceptorsCarryTheRequestID(t *testing.T) {
	out := outgoing(WithRequestID(context.Background(), "abc-1"))
	md, _ := metadata.FromOutgoingContext(out)
	in := incoming(metadata.NewIncomingContext(context.Background(), md))
	if got := RequestID(in); got != "abc-1" {
		t.Errorf("request id across the wire: %q, want abc-1", got)
	}
	bad := incoming(metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetaRequestID, "x\ny")))
	if got := RequestID(bad); got != "" {
		t.Errorf("an invalid id from a peer was taken: %q", got)
	}
}

func TestErrorNamesTheRequestID(t *testing.T) {
	base := errors.New("boom")
	err := fmt.Errorf("call: %w", &Error{ID: "r9", Err: base})
	if RequestIDOf(err) != "r9" || !errors.Is(err, base) || !strings.Contains(err.Error(), "request_id r9") {
		t.Errorf("%v: want it to name r9 and wrap boom", err)
	}
	if RequestIDOf(base) != "" {
		t.Error("an error without one names a request id")
	}
}

func FuzzValidRequestID(f *testing.F) {
	for _, s := range []string{"", "4bf92f3577b34da6a3ce929d0e0e4736", "a b", "x\r\nSet-Cookie: y", strings.Repeat("a", 65), "550e8400-e29b-41d4-a716-446655440000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidRequestID(s) {
			return
		}
		if len(s) == 0 || len(s) > maxRequestID || strings.ContainsAny(s, " \t\r\n\"=\\") {
			t.Errorf("accepted %q", s)
		}
		// Safe in a header and in a text log line as it is.
		if q := fmt.Sprintf("%q", s); q != `"`+s+`"` {
			t.Errorf("accepted %q, which needs quoting", s)
		}
	})
}

// BenchmarkRequestIDPath is what a call pays for its request id with
// tracing off: made at the client, sent in the metadata, taken at the
// node (the untraced call's whole added cost on the wire path).
func BenchmarkRequestIDPath(b *testing.B) {
	b.ReportAllocs()
	ctx, id := EnsureRequestID(context.Background())
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetaRequestID, id))
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, _ := EnsureRequestID(context.Background())
			_ = outgoing(ctx)
		}
	})
	b.Run("node", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = EnsureRequestID(incoming(in))
		}
	})
	_ = ctx
}
