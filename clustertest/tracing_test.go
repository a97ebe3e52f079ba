package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/kv"
	"github.com/neptune-cluster/neptune/internal/gateway"
)

// lockedBuffer is a log destination several nodes write to at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOneCallsSpanTreeAndRequestID follows one write through a gateway, the
// client, the primary of a replicated kv partition (two replicas, so the
// write is replicated before it commits) and its handler: every span
// shares one trace, each is the child of the one before it, the trace id
// is the request id the gateway answered, and the node that served the
// write logged that request id.
func TestOneCallsSpanTreeAndRequestID(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	logs := &lockedBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rep := neptune.Replication{Level: 2, Degree: 2, Nodes: []string{"t0", "t1"}}
	var join []string
	for _, id := range rep.Nodes {
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join,
			AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second, DataDir: filepath.Join(t.TempDir(), id),
			Logger: log, TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		svc := kv.New().Service()
		r := rep
		svc.Replication = &r
		if err := nd.Register(svc, 0); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		join = []string{nd.GossipAddr()}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: join, Security: neptune.Security{Insecure: true}, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 15*time.Second, func() bool {
		_, err := c.Call(ctx, "kv", 0, "put", []byte("warm=up"))
		return err == nil
	})

	g, err := gateway.New(gateway.Config{CapacityGRPS: 100, Routes: []gateway.Route{{Service: "kv", Method: "put"}}}.WithDefaults(),
		gateway.Deps{Caller: c, TracerProvider: tp, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	go g.Run(ctx)
	srv := httptest.NewServer(g)
	defer srv.Close()

	exp.Reset()
	resp, err := http.Post(srv.URL+"/", "application/octet-stream", strings.NewReader("k=v"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("gateway answered %d: %s", resp.StatusCode, body)
	}
	rid := resp.Header.Get("X-Request-Id")
	if rid == "" {
		t.Fatal("the gateway's answer has no X-Request-Id")
	}

	// The chain from the gateway down to the handler, each the parent of
	// the next; the replication stages are children of the write.
	chain := []string{"neptune.gateway", "neptune.client.Call", "neptune.v1.Node/Call", "neptune.v1.Node/Call",
		"neptune.replication.write", "neptune.replication.commit", "neptune.node.queue"}
	var spans tracetest.SpanStubs
	waitFor(t, 5*time.Second, func() bool {
		spans = spansOf(exp.GetSpans(), rid)
		return len(spans) >= len(chain)+3 // + append, replicate, handler
	})
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	find := func(name string, kind trace.SpanKind, parent tracetest.SpanStub) tracetest.SpanStub {
		t.Helper()
		for _, s := range spans {
			if s.Name == name && (kind == trace.SpanKindUnspecified || s.SpanKind == kind) && s.Parent.SpanID() == parent.SpanContext.SpanID() {
				return s
			}
		}
		t.Fatalf("no span %q (kind %v) under %q; the trace:\n%s", name, kind, parent.Name, dumpSpans(spans, byID))
		return tracetest.SpanStub{}
	}
	var root tracetest.SpanStub
	for _, s := range spans {
		if s.Name == chain[0] {
			root = s
		}
	}
	if root.Name == "" || root.Parent.IsValid() {
		t.Fatalf("no root gateway span; the trace:\n%s", dumpSpans(spans, byID))
	}
	if got := root.SpanContext.TraceID().String(); got != rid {
		t.Errorf("trace id %s, request id %s: want the request id to be the trace id", got, rid)
	}
	kinds := []trace.SpanKind{trace.SpanKindServer, trace.SpanKindInternal, trace.SpanKindClient, trace.SpanKindServer,
		trace.SpanKindInternal, trace.SpanKindInternal, trace.SpanKindInternal}
	parent := root
	for i, name := range chain[1:] {
		s := find(name, kinds[i+1], parent)
		if name == "neptune.replication.write" {
			find("neptune.replication.append", trace.SpanKindInternal, s)
			find("neptune.replication.replicate", trace.SpanKindInternal, s)
		}
		if name == "neptune.replication.commit" {
			find("neptune.handler kv.put", trace.SpanKindInternal, s)
		}
		parent = s
	}
	call := find("neptune.client.Call", trace.SpanKindInternal, root)
	attrs := map[string]string{}
	for _, a := range call.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	for k, want := range map[string]string{"neptune.service": "kv", "neptune.partition": "0", "neptune.method": "put", "neptune.attempts": "1"} {
		if attrs[k] != want {
			t.Errorf("client span attribute %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
		}
	}
	if attrs["neptune.replica"] == "" {
		t.Errorf("client span names no chosen replica: %v", attrs)
	}

	// The node that served the write logged the request id.
	served := false
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "call served" && line["request_id"] == rid {
			served = line["node"] == attrs["neptune.replica"]
		}
	}
	if !served {
		t.Errorf("no \"call served\" line with request_id %s from node %s in the logs:\n%s", rid, attrs["neptune.replica"], logs.String())
	}

	// A failed call names its request id, at the gateway and in Go.
	resp, err = http.Post(srv.URL+"/", "application/octet-stream", strings.NewReader("no equals sign"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if id := resp.Header.Get("X-Request-Id"); resp.StatusCode == http.StatusOK || id == "" || !strings.Contains(string(body), "request_id "+id) {
		t.Errorf("failed call: status %d, X-Request-Id %q, body %q; want an error naming the request id", resp.StatusCode, id, body)
	}
	_, err = c.Call(neptune.WithRequestID(ctx, "my-request-7"), "kv", 0, "nosuch", nil)
	if err == nil || neptune.RequestIDOf(err) != "my-request-7" || !strings.Contains(err.Error(), "request_id my-request-7") {
		t.Errorf("Call's error %v; want it to name request id my-request-7", err)
	}
}
