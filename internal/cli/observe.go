package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune/internal/version"
)

// logFormats are --log-format's values: text (logfmt-like key=value, for
// people) and json (one object per line, for log pipelines).
var logFormats = []string{"text", "json"}

// newLogger is a logger on w in format ("" is text) at level.
func newLogger(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, Usagef("--log-format %q (config: log_format): want one of %s", format, strings.Join(logFormats, ", "))
}

// tracing is what --otlp-endpoint and --trace-sample-ratio configure.
type tracing struct {
	// Endpoint is the OTLP/gRPC collector's URL (http://host:4317 for
	// plaintext, https:// for TLS); empty leaves it to the OTel SDK's
	// variables (OTEL_EXPORTER_OTLP_ENDPOINT, ..._TRACES_ENDPOINT), and
	// with none of them set tracing is off.
	Endpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of traces started here that are recorded
	// (0..1; default 1); a call whose caller sampled it is recorded
	// whatever this says (parent-based).
	SampleRatio *float64 `yaml:"trace_sample_ratio"`
}

// otelEndpointVars are the OTel SDK's variables that name a collector.
var otelEndpointVars = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// enabled reports whether a collector is named, by the flag or the SDK's
// variables (lookup reads them).
func (t tracing) enabled(lookup func(string) (string, bool)) bool {
	if t.Endpoint != "" {
		return true
	}
	for _, v := range otelEndpointVars {
		if s, ok := lookup(v); ok && s != "" {
			return true
		}
	}
	return false
}

// Validate names the first bad setting.
func (t tracing) Validate() error {
	if t.Endpoint != "" {
		u, err := url.Parse(t.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Usagef("--otlp-endpoint %q (config: otlp_endpoint): want a URL, http://host:4317 (plaintext) or https://host:4317", t.Endpoint)
		}
	}
	if r := t.SampleRatio; r != nil && (*r < 0 || *r > 1 || *r != *r) {
		return Usagef("--trace-sample-ratio %v (config: trace_sample_ratio): want 0..1", *r)
	}
	return nil
}

// provider is the TracerProvider exporting to the collector, and its
// shutdown (flushing the spans still batched); a nil provider when
// tracing is off, which the product takes as off at no cost. service
// and instance name the process in the traces.
func (t tracing) provider(ctx context.Context, service, instance string) (trace.TracerProvider, func(), error) {
	if err := t.Validate(); err != nil {
		return nil, nil, err
	}
	if !t.enabled(os.LookupEnv) {
		return nil, func() {}, nil
	}
	var opts []otlptracegrpc.Option
	if t.Endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpointURL(t.Endpoint))
	}
	exp, err := otlptracegrpc.New(ctx, opts...) // dials lazily: a collector down is not fatal
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	ratio := 1.0
	if t.SampleRatio != nil {
		ratio = *t.SampleRatio
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", service), attribute.String("service.version", version.Release)}
	if instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", instance))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	)
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(os.Stderr, "tracing: flushing spans: %v\n", err)
		}
	}
	return tp, shutdown, nil
}
