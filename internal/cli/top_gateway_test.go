package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/echo"
	"github.com/neptune-cluster/neptune/internal/dashboard"
	"github.com/neptune-cluster/neptune/internal/gateway"
)

// startEcho starts a node hosting echo, joined to join if given.
func startEcho(t *testing.T, id string, join ...string) *neptune.Node {
	t.Helper()
	nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join, AnnounceInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Register(echo.Service(), 0); err != nil {
		t.Fatal(err)
	}
	if err := nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close() })
	return nd
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A gateway's dashboard opened after a member left still shows it, dead,
// at its last address and with why it went (from the client's memory of
// departed members), and polls the live members' loads.
func TestGatewayDashboardShowsDepartedMember(t *testing.T) {
	n0 := startEcho(t, "n0")
	n1 := startEcho(t, "n1", n0.GossipAddr())
	ctx := context.Background()
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: []string{n0.GossipAddr()}, Security: neptune.Security{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "both members in the client's yellow pages", func() bool { return len(c.Members(ctx, 0)) == 2 })
	var n1RPC string
	for _, m := range c.Members(ctx, 0) {
		if m.Node == "n1" {
			n1RPC = m.RPCAddr
		}
	}
	if err := n1.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n1 among the client's departed members", func() bool {
		ds := c.Departed()
		return len(ds) == 1 && ds[0].Node == "n1"
	})

	g, err := gateway.New(gateway.Config{CapacityGRPS: 100, Routes: []gateway.Route{{Service: "echo", Method: "echo"}}}.WithDefaults(), gateway.Deps{Caller: c})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	if err := mountGatewayDashboard(mux, g, c, prometheus.NewRegistry(), dashboard.PeerRSS{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + dashboard.APIPrefix + "cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cv dashboard.ClusterView
	if err := json.NewDecoder(resp.Body).Decode(&cv); err != nil {
		t.Fatal(err)
	}
	rows := map[string]dashboard.MemberRow{}
	for _, r := range cv.Members {
		rows[r.Node] = r
	}
	if cv.Alive != 1 || cv.Dead != 1 || len(rows) != 2 {
		t.Fatalf("members %+v: %d alive, %d dead; want n0 alive and n1 dead", cv.Members, cv.Alive, cv.Dead)
	}
	if d := rows["n1"]; d.State != dashboard.StateDead || d.Why == "" || d.RPCAddr != n1RPC || len(d.Services) != 1 || d.Services[0].Name != "echo" {
		t.Errorf("n1: %+v; want dead, why it went, at its last address %s, hosting echo", d, n1RPC)
	}
	if a := rows["n0"]; a.State != dashboard.StateAlive || len(a.Services) != 1 || a.Services[0].Late != 0 {
		t.Errorf("n0: %+v; want alive with echo's load polled", a)
	}
}
