package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// TestLogFormatAndTracingSettings: --log-format, --otlp-endpoint and
// --trace-sample-ratio come from the config file, their variables and
// the flags like every other setting, and bad values name the flag and
// the key.
func TestLogFormatAndTracingSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "node.yaml")
	yaml := "id: n1\nservices: [{name: echo, partitions: [0]}]\nsecurity: {insecure: true}\nlog_format: json\notlp_endpoint: http://collector:4317\ntrace_sample_ratio: 0.25\n"
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	fc, err := NodeConfigFor(nil, map[string]string{"NEPTUNE_CONFIG": file})
	if err != nil {
		t.Fatal(err)
	}
	if fc.LogFormat != "json" || fc.Tracing.Endpoint != "http://collector:4317" || fc.Tracing.SampleRatio == nil || *fc.Tracing.SampleRatio != 0.25 {
		t.Fatalf("from the file: %+v %+v", fc, fc.Tracing)
	}
	fc, err = NodeConfigFor([]string{"--trace-sample-ratio", "0.5"}, map[string]string{"NEPTUNE_CONFIG": file, "NEPTUNE_LOG_FORMAT": "text"})
	if err != nil {
		t.Fatal(err)
	}
	if fc.LogFormat != "text" || *fc.Tracing.SampleRatio != 0.5 {
		t.Fatalf("variable and flag over the file: %q %v", fc.LogFormat, *fc.Tracing.SampleRatio)
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"NEPTUNE_LOG_FORMAT": "xml"}, nil, "log_format"},
		{nil, []string{"--otlp-endpoint", "collector:4317"}, "otlp_endpoint"},
		{nil, []string{"--trace-sample-ratio", "1.5"}, "trace_sample_ratio"},
	} {
		tc.env = map[string]string{"NEPTUNE_CONFIG": file, "NEPTUNE_LOG_FORMAT": tc.env["NEPTUNE_LOG_FORMAT"]}
		if tc.env["NEPTUNE_LOG_FORMAT"] == "" {
			delete(tc.env, "NEPTUNE_LOG_FORMAT")
		}
		if _, err := NodeConfigFor(tc.args, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: error %v, want one naming %s", tc.args, tc.env, err, tc.want)
		}
	}
	gw := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(gw, []byte("capacity_grps: 100\nroutes: [{service: echo, method: echo}]\njoin: [seed:7946]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := GatewayConfigFor([]string{"--insecure", "--log-format", "yaml"}, map[string]string{"NEPTUNE_CONFIG": gw}); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("gateway, bad --log-format: %v", err)
	}
}

func TestJSONLogLines(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "json", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "k", 1)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["msg"] != "hello" {
		t.Errorf("json line %q: %v", buf.String(), err)
	}
}

// TestTracingOffByDefault: without an endpoint (flag or the OTel SDK's
// variables) there is no provider, which the product takes as off.
func TestTracingOffByDefault(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tp, flush, err := tracing{}.provider(context.Background(), "neptune-node", "n1")
	if err != nil || tp != nil {
		t.Fatalf("no endpoint: provider %v, %v; want none", tp, err)
	}
	flush()
	if !(tracing{}).enabled(func(k string) (string, bool) { return "http://c:4317", k == "OTEL_EXPORTER_OTLP_ENDPOINT" }) {
		t.Error("OTEL_EXPORTER_OTLP_ENDPOINT does not turn tracing on")
	}
	tp, flush, err = tracing{Endpoint: "http://127.0.0.1:1"}.provider(context.Background(), "neptune-node", "n1")
	if err != nil || tp == nil {
		t.Fatalf("with an endpoint: %v, %v", tp, err)
	}
	flush() // nothing to send: returns although nobody listens
}

// collector is an OTLP/gRPC trace receiver recording what it is sent.
type collector struct {
	coltrace.UnimplementedTraceServiceServer
	mu   sync.Mutex
	got  []*tracepb.ResourceSpans
	recv chan struct{}
}

func (c *collector) Export(_ context.Context, in *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	c.got = append(c.got, in.ResourceSpans...)
	c.mu.Unlock()
	select {
	case c.recv <- struct{}{}:
	default:
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// TestOTLPEndpointReceivesSpans: with --otlp-endpoint set, the spans of
// the process reach the collector over OTLP/gRPC, flushed at exit, named
// by service and instance.
func TestOTLPEndpointReceivesSpans(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	col := &collector{recv: make(chan struct{}, 1)}
	coltrace.RegisterTraceServiceServer(srv, col)
	go srv.Serve(ln)
	defer srv.Stop()

	ratio := 1.0
	tp, flush, err := tracing{Endpoint: "http://" + ln.Addr().String(), SampleRatio: &ratio}.provider(context.Background(), "neptune-node", "n1")
	if err != nil || tp == nil {
		t.Fatalf("provider: %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "neptune.test")
	span.End()
	flush()
	select {
	case <-col.recv:
	case <-time.After(10 * time.Second):
		t.Fatal("the collector received nothing")
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	attrs := map[string]string{}
	var names []string
	for _, rs := range col.got {
		for _, a := range rs.GetResource().GetAttributes() {
			attrs[a.Key] = a.GetValue().GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				names = append(names, s.Name)
			}
		}
	}
	if len(names) != 1 || names[0] != "neptune.test" || attrs["service.name"] != "neptune-node" || attrs["service.instance.id"] != "n1" {
		t.Errorf("collector got spans %v with resource %v", names, attrs)
	}
}
