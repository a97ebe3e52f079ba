package gateway

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/gage"
)

// The gateway charges a request what the node measured, not its own wall
// time: the handler reports 50 ms of CPU it used in a child process, so
// each request costs 5 generic requests (10 ms of CPU each), which the
// scheduler's prediction and served_gru_total show; the node's accounting
// cycles, carried on the answers, make the capacity a measured one.
func TestGatewayChargesWhatTheNodeMeasured(t *testing.T) {
	cost := neptune.Service{Name: "cost", Methods: []neptune.Method{{Name: "m", Mode: neptune.Read,
		Handler: func(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
			return &neptune.Response{Body: []byte("ok"), Used: neptune.Usage{CPU: 50 * time.Millisecond}}, nil
		}}}}
	nd := startNode(t, cost)
	g, reg := start(t, `
capacity_grps: 100000
subscribers:
  - {name: gold, reservation: 10, api_keys: [`+gage.HashKey("gold")+`]}
routes: [{service: cost, method: m}]
`, nd.Client(), nil)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		if w := do(g, "POST", "/", key("gold"), ""); w.Code != 200 {
			t.Fatalf("request %d: %d %q", i, w.Code, w.Body)
		}
		if i >= 5 && g.Status().Measured {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d requests the capacity is still the configured one: %+v", i, g.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, q := range g.loop.queues(context.Background()) {
		if q.Subscriber == "gold" && (q.Predicted < 5 || q.Predicted > 6) {
			t.Errorf("gold's predicted cost = %.2f GRU, want about 5 (50 ms of CPU at 10 ms per GRU)", q.Predicted)
		}
	}
	if got := value(t, reg, "neptune_gateway_served_gru_total", "subscriber", "gold"); got < 6*5 {
		t.Errorf("served_gru_total = %.1f after at least 6 requests of 5 GRU", got)
	}
	// The requests used CPU only, each its 5 GRU and a few bytes.
	st := g.Status().Subscribers[0]
	if by := st.ServedByResource; by["cpu"] < 6*5 || by["disk"] != 0 || by["net"] <= 0 || by["net"] >= by["cpu"] || math.Abs(by["cpu"]-st.ServedGRU) > 1e-6 {
		t.Errorf("served by resource %v, served_gru %.1f: want cpu = served_gru >= 30, no disk, a little net", by, st.ServedGRU)
	}
	if c := g.Status().CapacityGRU; c == 100000 || c <= 0 {
		t.Errorf("capacity %.1f GRPS: not measured", c)
	}
}

// With measured_capacity: false the gateway still charges what the node
// measured, but paces to the configured capacity: the node's accounting
// cycles, which made it measured above, leave it alone.
func TestMeasuredCapacityOffKeepsTheConfiguredCapacity(t *testing.T) {
	cost := neptune.Service{Name: "cost", Methods: []neptune.Method{{Name: "m", Mode: neptune.Read,
		Handler: func(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
			return &neptune.Response{Body: []byte("ok"), Used: neptune.Usage{CPU: 50 * time.Millisecond}}, nil
		}}}}
	nd := startNode(t, cost)
	g, _ := start(t, `
capacity_grps: 100000
measured_capacity: false
subscribers:
  - {name: gold, reservation: 10, api_keys: [`+gage.HashKey("gold")+`]}
routes: [{service: cost, method: m}]
`, nd.Client(), nil)
	for i := range 15 { // 300 ms: accounting cycles of at most 100 ms
		if w := do(g, "POST", "/", key("gold"), ""); w.Code != 200 {
			t.Fatalf("request %d: %d %q", i, w.Code, w.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, q := range g.loop.queues(context.Background()) {
		if q.Subscriber == "gold" && (q.Predicted < 5 || q.Predicted > 6) {
			t.Errorf("gold's predicted cost = %.2f GRU, want about 5: the node's measure", q.Predicted)
		}
	}
	if st := g.Status(); st.Measured || st.CapacityGRU != 100000 {
		t.Errorf("capacity %.1f GRPS, measured %v: want the configured 100000", st.CapacityGRU, st.Measured)
	}
}

// gossipPair builds two gateways on one manual clock that gossip over
// loopback UDP; b names a (and bPeers) as its peers, and a learns b when
// it hears it. regA is a's metrics.
func gossipPair(t *testing.T, clk *clock.Manual, bPeers ...string) (a, b *Gateway, stopB func(), regA *prometheus.Registry) {
	t.Helper()
	return gossipPairWith(t, clk, testGossip(t, "a"), bPeers...)
}

// gossipPairWith is gossipPair with a's gossip security secA.
func gossipPairWith(t *testing.T, clk *clock.Manual, secA GossipSecurity, bPeers ...string) (a, b *Gateway, stopB func(), regA *prometheus.Registry) {
	t.Helper()
	y := `
capacity_grps: 100000
unit: {net: 1000}
gossip: 127.0.0.1:0
%s
subscribers:
  - {name: shop, reservation: 50, api_keys: [` + gage.HashKey("shop") + `]}
  - {name: other, reservation: 20, api_keys: [` + gage.HashKey("other") + `]}
routes: [{service: s, method: m}]
`
	f := &fakeCaller{answer: func(context.Context, call) (*neptune.Response, error) {
		return &neptune.Response{Body: bytes.Repeat([]byte{'x'}, 1000)}, nil
	}}
	a, regA = startWith(t, fmt.Sprintf(y, "name: a"), f, clk, &secA)
	cfg, err := ParseConfig([]byte(fmt.Sprintf(y, "name: b\npeers: ["+strings.Join(append([]string{a.GossipAddr()}, bPeers...), ", ")+"]")))
	if err != nil {
		t.Fatal(err)
	}
	b, err = New(cfg, Deps{Caller: f, Clock: clk, Gossip: testGossip(t, "b")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Run(ctx); close(done) }()
	var once sync.Once
	stopB = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stopB)
	return a, b, stopB, regA
}

func share(g *Gateway, sub string) float64 {
	for _, s := range g.Status().Subscribers {
		if s.Name == sub {
			return s.Share
		}
	}
	return math.NaN()
}

// Two gateways split a reservation by the demand each sees: 90 requests
// of shop at a, 10 at b, against a reservation of 50 GRPS, gives a about
// 0.025 + 0.95·0.9 of it and b the rest (gage.Splitter's formula), the
// two adding up to the whole. When b dies, a holds the whole reservation
// once b's last message is older than peer_ttl (1 s), and not before.
func TestTwoGatewaysSplitAReservationByDemand(t *testing.T) {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b, stopB, _ := gossipPair(t, clk)
	for range 90 {
		if w := do(a, "POST", "/", key("shop"), ""); w.Code != 200 {
			t.Fatalf("a: %d", w.Code)
		}
	}
	for range 10 {
		if w := do(b, "POST", "/", key("shop"), ""); w.Code != 200 {
			t.Fatalf("b: %d", w.Code)
		}
	}
	wantA := 0.05/2 + 0.95*0.9
	deadline := time.Now().Add(10 * time.Second)
	for {
		clk.Advance(DefaultGossipPeriod)
		time.Sleep(10 * time.Millisecond) // real time for the datagrams
		sa, sb := share(a, "shop"), share(b, "shop")
		if len(a.Status().Gateways) == 2 && len(b.Status().Gateways) == 2 && math.Abs(sa-wantA) < 0.01 && math.Abs(sb-(1-wantA)) < 0.01 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shares a %.3f b %.3f (want %.3f and %.3f), gateways %v / %v", sa, sb, wantA, 1-wantA, a.Status().Gateways, b.Status().Gateways)
		}
	}
	// A subscriber with no demand anywhere is split evenly.
	if so := share(a, "other"); math.Abs(so-0.5) > 0.01 {
		t.Errorf("other (no demand) at a: %.3f, want 0.5", so)
	}

	stopB()
	// b's last message reached a at the latest one period ago.
	var waited time.Duration
	for share(a, "shop") < 1 {
		clk.Advance(DefaultGossipPeriod)
		waited += DefaultGossipPeriod
		time.Sleep(5 * time.Millisecond)
		if waited > DefaultPeerTTL+3*DefaultGossipPeriod {
			t.Fatalf("a's share is %.3f %v after b died; the bound is peer_ttl + a period", share(a, "shop"), waited)
		}
	}
	if waited < DefaultPeerTTL-DefaultGossipPeriod {
		t.Fatalf("a took the whole reservation %v after b stopped, before peer_ttl (%v): a live peer would lose its share too", waited, DefaultPeerTTL)
	}
	if gws := a.Status().Gateways; len(gws) != 1 || gws[0] != "a" {
		t.Errorf("live gateways at a: %v, want [a]", gws)
	}
}

// /api/subscribers serves the status as JSON.
func TestStatusHandler(t *testing.T) {
	g, _ := start(t, statusConfig, &fakeCaller{}, nil)
	do(g, "GET", "/kv/1", key("gold-key"), "")
	w := do2(g.StatusHandler(), StatusPath)
	if w.Code != 200 || !bytes.Contains(w.Body.Bytes(), []byte(`"name":"gold","reserved_grps":10,"share":1`)) ||
		!bytes.Contains(w.Body.Bytes(), []byte(`"demanded":1,"served":1,"dropped":0`)) {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}

func do2(h http.Handler, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
	return w
}
