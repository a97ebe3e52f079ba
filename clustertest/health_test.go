package clustertest

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/neptune-cluster/neptune"
)

// TestHealthProbes: /livez and /readyz on the metrics listener and
// grpc.health.v1 on the RPC port answer as Kubernetes probes expect: a
// node whose replicas are open and caught up is ready, overall and for
// its service; a service it does not host is NOT_FOUND.
func TestHealthProbes(t *testing.T) {
	rep := &neptune.Replication{Level: 2, Nodes: []string{"a", "b"}, Degree: 2}
	metrics := func(c *neptune.NodeConfig) { c.MetricsAddr = "127.0.0.1:0" }
	a, err := startKV(t, "a", filepath.Join(t.TempDir(), "a"), rep, nil, metrics)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startKV(t, "b", filepath.Join(t.TempDir(), "b"), rep, []string{a.GossipAddr()}, metrics)
	if err != nil {
		t.Fatal(err)
	}
	get := func(nd *neptune.Node, path string) (int, string) {
		resp, err := http.Get("http://" + nd.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/livez", "/healthz"} {
		if code, body := get(b, path); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
			t.Fatalf("%s: %d %q", path, code, body)
		}
	}
	waitFor(t, 15*time.Second, func() bool { code, _ := get(b, "/readyz"); return code == http.StatusOK })

	conn, err := grpc.NewClient(b.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitFor(t, 5*time.Second, func() bool {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "kv"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("overall: %v %v", r, err)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nosuch"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unhosted service: %v, want NotFound", err)
	}
	// A draining node is not ready from the start of its drain.
	drained := make(chan struct{})
	go func() { b.Drain(context.Background()); close(drained) }()
	sawDraining := false
	for !sawDraining {
		resp, err := http.Get("http://" + b.MetricsAddr() + "/readyz")
		if err != nil {
			break // closed
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sawDraining = resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "draining")
	}
	<-drained
	if !sawDraining {
		t.Fatal("/readyz never said draining")
	}
}
