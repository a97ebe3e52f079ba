package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/neptune-cluster/neptune/apps/echo"
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

// TestAggregationAndStreamSpanTrees follows one Data Aggregation Call over
// four partitions on two nodes and one bidirectional and one server
// stream: each is one trace whose spans form the tree of the RPCs that
// carried it (the W3C context crossing every Aggregate RPC and each
// stream), with every partition's local operator, the reductions that
// merged them and each stream's message counts on both sides.
func TestAggregationAndStreamSpanTrees(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var join []string
	for i := range 2 {
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: fmt.Sprintf("t%d", i), Join: join,
			AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second, TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		if err := nd.Register(sumService(), 2*i, 2*i+1); err != nil {
			t.Fatal(err)
		}
		if err := nd.Register(echo.Service(), i); err != nil {
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
	parts := []int{0, 1, 2, 3}
	agg := neptune.Aggregation{Service: "sum", Partitions: parts, Local: "work", Reduce: "sum", Deadline: 5 * time.Second}
	waitFor(t, 15*time.Second, func() bool {
		res, err := c.Aggregate(ctx, agg)
		return err == nil && res.Status == neptune.AggregateFull
	})

	// One aggregation.
	exp.Reset()
	if res, err := c.Aggregate(ctx, agg); err != nil || res.Status != neptune.AggregateFull {
		t.Fatalf("aggregate: %+v, %v", res, err)
	}
	root := rootSpan(t, exp, "neptune.client.Aggregate")
	tr := traceOf(t, exp, root, func(spans tracetest.SpanStubs) bool {
		return countSpans(spans, "neptune.aggregate.local") == len(parts) && countSpans(spans, "neptune.aggregate.reduce") == len(parts)-1
	})
	tr.attrs(root, map[string]string{"neptune.service": "sum", "neptune.partitions": "4", "neptune.participants": "4", "neptune.status": "full",
		"neptune.contributing": "4"})
	if p := tr.attr(root, "neptune.polls"); p == "" || p == "0" {
		t.Errorf("the aggregation's span says it polled %q nodes; want some", p)
	}
	// Every node's part hangs from the server span of the Aggregate RPC
	// that sent it its subtree, that from the client span of the sender
	// (the caller or a parent node's part); every operator from a part.
	covered := map[string]bool{}
	for _, s := range tr.spans {
		switch s.Name {
		case "neptune.aggregate.node":
			srv := tr.parentOf(s, "neptune.v1.Node/Aggregate", trace.SpanKindServer)
			cl := tr.parentOf(srv, "neptune.v1.Node/Aggregate", trace.SpanKindClient)
			if p := tr.byID[cl.Parent.SpanID()]; p.Name != "neptune.client.Aggregate" && p.Name != "neptune.aggregate.node" {
				t.Errorf("an Aggregate RPC sent by %q; want the caller or a node's part\n%s", p.Name, tr.dump())
			}
		case "neptune.aggregate.local":
			tr.parentOf(s, "neptune.aggregate.node", trace.SpanKindInternal)
			covered[tr.attr(s, "neptune.partition")] = true
		case "neptune.aggregate.reduce":
			tr.parentOf(s, "neptune.aggregate.node", trace.SpanKindInternal)
		}
	}
	if len(covered) != len(parts) {
		t.Errorf("local operators ran for partitions %v; want each of %v once\n%s", covered, parts, tr.dump())
	}

	// One bidirectional stream: three rounds.
	exp.Reset()
	s, err := c.OpenStream(ctx, "echo", 0, "talk")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Send(fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
	root = rootSpan(t, exp, "neptune.client.OpenStream")
	tr = traceOf(t, exp, root, func(spans tracetest.SpanStubs) bool { return countSpans(spans, "neptune.handler echo.talk") == 1 })
	tr.attrs(root, map[string]string{"neptune.service": "echo", "neptune.method": "talk", "neptune.stream.sent": "3", "neptune.stream.received": "3"})
	if tr.attr(root, "neptune.replica") == "" {
		t.Errorf("the stream's span names no replica\n%s", tr.dump())
	}
	cl := tr.childOf(root, "neptune.v1.Node/BidiStream", trace.SpanKindClient)
	srv := tr.childOf(cl, "neptune.v1.Node/BidiStream", trace.SpanKindServer)
	tr.attrs(srv, map[string]string{"neptune.stream.received": "3", "neptune.stream.sent": "3"})
	tr.childOf(srv, "neptune.handler echo.talk", trace.SpanKindInternal)

	// One server stream of four chunks.
	exp.Reset()
	ss, err := c.Stream(ctx, "echo", 0, "chunks", []byte{4, 'x'})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := ss.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	root = rootSpan(t, exp, "neptune.client.Stream")
	tr = traceOf(t, exp, root, func(spans tracetest.SpanStubs) bool { return countSpans(spans, "neptune.handler echo.chunks") == 1 })
	tr.attrs(root, map[string]string{"neptune.method": "chunks", "neptune.stream.received": "4"})
	cl = tr.childOf(root, "neptune.v1.Node/Stream", trace.SpanKindClient)
	srv = tr.childOf(cl, "neptune.v1.Node/Stream", trace.SpanKindServer)
	tr.attrs(srv, map[string]string{"neptune.stream.sent": "4"})
	tr.childOf(srv, "neptune.handler echo.chunks", trace.SpanKindInternal)
}

// rootSpan waits for the ended span named name that has no parent.
func rootSpan(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var root tracetest.SpanStub
	waitFor(t, 5*time.Second, func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == name && !s.Parent.IsValid() {
				root = s
				return true
			}
		}
		return false
	})
	return root
}

// spanTree is one trace's ended spans, by id.
type spanTree struct {
	t     *testing.T
	spans tracetest.SpanStubs
	byID  map[trace.SpanID]tracetest.SpanStub
}

// traceOf waits until root's trace is complete and returns it: done
// holds and every span's parent has ended too. A server span ends after
// the handler's span under it, and may end after the client has seen the
// call's last message (a node's aggregation part before its Aggregate RPC,
// a stream's handler before its Stream RPC: both seen missing in CI), so
// counting the handler's spans alone is not enough.
func traceOf(t *testing.T, exp *tracetest.InMemoryExporter, root tracetest.SpanStub, done func(tracetest.SpanStubs) bool) *spanTree {
	t.Helper()
	var spans tracetest.SpanStubs
	deadline := time.Now().Add(5 * time.Second)
	for spans = spansOf(exp.GetSpans(), root.SpanContext.TraceID().String()); !done(spans) || !connected(spans); spans = spansOf(exp.GetSpans(), root.SpanContext.TraceID().String()) {
		if time.Now().After(deadline) {
			tr := &spanTree{t: t, spans: spans, byID: map[trace.SpanID]tracetest.SpanStub{}}
			for _, s := range spans {
				tr.byID[s.SpanContext.SpanID()] = s
			}
			t.Fatalf("the trace of %s is not complete:\n%s", root.Name, tr.dump())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tr := &spanTree{t: t, spans: spans, byID: map[trace.SpanID]tracetest.SpanStub{}}
	for _, s := range spans {
		tr.byID[s.SpanContext.SpanID()] = s
	}
	return tr
}

func (tr *spanTree) dump() string { return dumpSpans(tr.spans, tr.byID) }

// parentOf is s's parent, which must be named name and of kind kind.
func (tr *spanTree) parentOf(s tracetest.SpanStub, name string, kind trace.SpanKind) tracetest.SpanStub {
	tr.t.Helper()
	p, ok := tr.byID[s.Parent.SpanID()]
	if !ok || p.Name != name || p.SpanKind != kind {
		tr.t.Fatalf("%s's parent is %q (%v); want %q (%v)\n%s", s.Name, p.Name, p.SpanKind, name, kind, tr.dump())
	}
	return p
}

// childOf is parent's one child named name of kind kind.
func (tr *spanTree) childOf(parent tracetest.SpanStub, name string, kind trace.SpanKind) tracetest.SpanStub {
	tr.t.Helper()
	for _, s := range tr.spans {
		if s.Name == name && s.SpanKind == kind && s.Parent.SpanID() == parent.SpanContext.SpanID() {
			return s
		}
	}
	tr.t.Fatalf("no span %q (%v) under %q\n%s", name, kind, parent.Name, tr.dump())
	return tracetest.SpanStub{}
}

// attr is s's attribute key as text, "" if it has none.
func (tr *spanTree) attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// attrs checks that s has each of want's attributes.
func (tr *spanTree) attrs(s tracetest.SpanStub, want map[string]string) {
	tr.t.Helper()
	for k, v := range want {
		if got := tr.attr(s, k); got != v {
			tr.t.Errorf("span %s: %s = %q, want %q", s.Name, k, got, v)
		}
	}
}

// connected reports whether every span's parent is among spans (the
// root's aside).
func connected(spans tracetest.SpanStubs) bool {
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	for _, s := range spans {
		if s.Parent.IsValid() && !ids[s.Parent.SpanID()] {
			return false
		}
	}
	return true
}

func countSpans(spans tracetest.SpanStubs, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name == name {
			n++
		}
	}
	return n
}
