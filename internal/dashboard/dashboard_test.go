package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/clock"
)

// fakeCluster is a synthetic yellow pages: nodes hosting partitions of
// one replicated service, degree 3, the first replica primary.
type fakeCluster struct {
	mu      sync.Mutex
	members []client.Member
	parts   []client.PartitionInfo
}

func (f *fakeCluster) Members(context.Context) ([]client.Member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]client.Member(nil), f.members...), nil
}

func (f *fakeCluster) Partitions(context.Context) ([]client.PartitionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]client.PartitionInfo(nil), f.parts...), nil
}

// PollLoad answers a member's loads as the synthetic yellow pages hold
// them.
func (f *fakeCluster) PollLoad(_ context.Context, m client.Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.members {
		if x.Node == m.Node {
			for p, l := range x.Services[0].Load {
				m.Services[0].Load[p] = l
			}
		}
	}
}

// staleness is the synthetic service's bound.
func staleness(string) time.Duration { return time.Second }

func newFakeCluster(nodes, partitions int) *fakeCluster {
	f := &fakeCluster{}
	hosted := make([][]int, nodes)
	for p := range partitions {
		part := client.PartitionInfo{Service: "kv", Partition: p, Level: 3}
		for r := range 3 {
			n := (p + r) % nodes
			hosted[n] = append(hosted[n], p)
			rep := client.ReplicaInfo{Node: fmt.Sprintf("n%02d", n), Role: "secondary", Epoch: 1, Primary: fmt.Sprintf("n%02d", p%nodes), Version: 100, Commit: 100}
			if r == 0 {
				rep.Role, rep.VersionAgo = "primary", 90
			}
			part.Replicas = append(part.Replicas, rep)
		}
		f.parts = append(f.parts, part)
	}
	for n := range nodes {
		load := map[int]int{}
		for _, p := range hosted[n] {
			load[p] = p % 5
		}
		f.members = append(f.members, client.Member{Node: fmt.Sprintf("n%02d", n), RPCAddr: fmt.Sprintf("10.0.0.%d:7000", n),
			Age: 300 * time.Millisecond, Services: []client.HostedService{{Name: "kv", Partitions: hosted[n], Load: load}}})
	}
	return f
}

// registry is a registry with the metrics a node exports, filled with
// some traffic.
func registry(t *testing.T) (*prometheus.Registry, *prometheus.CounterVec, *prometheus.HistogramVec) {
	t.Helper()
	reg := prometheus.NewRegistry()
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: mServerCalls}, []string{"service", "method", "code"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: mServerLatency, Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}, []string{"service", "method"})
	queue := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: mQueue}, []string{"service"})
	offered := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_class_offered_yield_total"}, []string{"service", "class"})
	realized := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_class_realized_yield_total"}, []string{"service", "class"})
	arrivals := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neptune_class_arrivals_total"}, []string{"service", "class"})
	guarantee := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neptune_class_guarantee"}, []string{"service", "class"})
	share := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neptune_class_window_share"}, []string{"service", "class"})
	queued := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neptune_class_queued"}, []string{"service", "class"})
	aggCalls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: mAggCalls}, []string{"service", "status"})
	aggCov := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: mAggCoverage, Buckets: []float64{0.5, 0.9, 0.99, 1}}, []string{"service"})
	reg.MustRegister(calls, lat, queue, offered, realized, arrivals, guarantee, share, queued, aggCalls, aggCov)
	for i := range 100 {
		calls.WithLabelValues("kv", "get", "ok").Inc()
		lat.WithLabelValues("kv", "get").Observe(float64(i+1) * 1e-4) // 0.1..10 ms
	}
	calls.WithLabelValues("kv", "put", "overloaded").Add(3)
	queue.WithLabelValues("kv").Set(4)
	offered.WithLabelValues("kv", "gold").Add(100)
	realized.WithLabelValues("kv", "gold").Add(80)
	arrivals.WithLabelValues("kv", "gold").Add(100)
	guarantee.WithLabelValues("kv", "gold").Set(0.5)
	share.WithLabelValues("kv", "gold").Set(0.3)
	queued.WithLabelValues("kv", "gold").Set(2)
	aggCalls.WithLabelValues("search", "full").Add(10)
	for range 10 {
		aggCov.WithLabelValues("search").Observe(0.95)
	}
	return reg, calls, lat
}

func get(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

// Every view renders for 64 nodes and 512 partitions, page and JSON
// twin, and shows what it should. The bound is generous: it catches
// quadratic blow-ups, not slow machines.
func TestLargeClusterRendersEveryView(t *testing.T) {
	fc := newFakeCluster(64, 512)
	reg, _, _ := registry(t)
	s, err := New(Config{Self: "n00", Members: fc, Loads: fc, Partitions: fc, Staleness: staleness, Gatherer: reg,
		Subscribers: SubscribersFunc(func(context.Context) (Subscribers, error) {
			return Subscribers{Gateway: "gw1", Subscribers: []Subscriber{{Name: "alice", Reserved: 100, Share: 1, DemandGRPS: 50, Served: 7}}}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Views {
		start := time.Now()
		page := get(t, s, "/"+v)
		js := get(t, s, APIPrefix+v)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: %v to render page and JSON", v, d)
		}
		if !strings.Contains(page, `<main id="view">`) || !strings.Contains(page, "/assets/live.js") {
			t.Errorf("%s: page lacks the layout", v)
		}
		if !json.Valid([]byte(js)) {
			t.Errorf("%s: invalid JSON: %.200s", v, js)
		}
		frag := get(t, s, "/"+v+"?fragment=1")
		if strings.Contains(frag, "<html") || !strings.Contains(frag, `data-view="`+v+`"`) {
			t.Errorf("%s: fragment is not just the content", v)
		}
	}
	var cv ClusterView
	mustJSON(t, get(t, s, APIPrefix+"cluster"), &cv)
	if len(cv.Members) != 64 || cv.Alive != 64 {
		t.Errorf("cluster: %d members, %d alive; want 64", len(cv.Members), cv.Alive)
	}
	for _, m := range cv.Members {
		if m.Services[0].Late != 0 || len(m.Services[0].Partitions) != 24 {
			t.Fatalf("member %s: %+v, want 24 partitions, every load polled", m.Node, m.Services[0])
		}
	}
	var pv PartitionsView
	mustJSON(t, get(t, s, APIPrefix+"partitions"), &pv)
	if pv.Total != 512 || pv.NoPrimary != 0 || len(pv.Partitions[511].Replicas) != 3 {
		t.Errorf("partitions: %d, %d without primary", pv.Total, pv.NoPrimary)
	}
	if got := strings.Count(get(t, s, "/partitions"), `class="partition`); got != 512 {
		t.Errorf("partitions page has %d rows, want 512", got)
	}
	if got := strings.Count(get(t, s, "/cluster"), `class="member `); got != 64 {
		t.Errorf("cluster page has %d rows, want 64", got)
	}
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v: %.300s", err, s)
	}
}

func TestFilters(t *testing.T) {
	fc := newFakeCluster(8, 16)
	s, _ := New(Config{Self: "n00", Members: fc, Partitions: fc})
	var pv PartitionsView
	mustJSON(t, get(t, s, APIPrefix+"partitions?service=kv&partition=5"), &pv)
	if pv.Total != 1 || pv.Partitions[0].Partition != 5 {
		t.Errorf("partition filter: %+v", pv.Partitions)
	}
	mustJSON(t, get(t, s, APIPrefix+"partitions?node=n03"), &pv)
	for _, p := range pv.Partitions {
		found := false
		for _, r := range p.Replicas {
			found = found || r.Node == "n03"
		}
		if !found {
			t.Errorf("node filter kept partition %d without n03", p.Partition)
		}
	}
	if pv.Total != 6 { // 16 partitions × 3 replicas over 8 nodes
		t.Errorf("node filter: %d partitions, want 6", pv.Total)
	}
	mustJSON(t, get(t, s, APIPrefix+"partitions?service=other"), &pv)
	if pv.Total != 0 {
		t.Errorf("service filter: %d partitions", pv.Total)
	}
	var cv ClusterView
	mustJSON(t, get(t, s, APIPrefix+"cluster?partition=5"), &cv)
	if len(cv.Members) != 3 {
		t.Errorf("cluster partition filter: %d members, want the 3 replicas", len(cv.Members))
	}
	page := get(t, s, "/partitions?service=kv&node=n03")
	if !strings.Contains(page, `href="/cluster?node=n03&amp;service=kv"`) {
		t.Errorf("navigation does not keep the filter")
	}
}

// A node that leaves the yellow pages shows as dead (greyed), one silent
// for two intervals as suspect.
func TestDeadNodeGreysOut(t *testing.T) {
	clk := clock.NewManual(time.Unix(1e9, 0))
	fc := newFakeCluster(4, 4)
	s, _ := New(Config{Self: "n00", Members: fc, Partitions: fc, Clock: clk, Interval: func() time.Duration { return time.Second }, TTL: 5 * time.Second})
	state := func() map[string]string {
		var cv ClusterView
		mustJSON(t, get(t, s, APIPrefix+"cluster"), &cv)
		out := map[string]string{}
		for _, m := range cv.Members {
			out[m.Node] = m.State
		}
		return out
	}
	if st := state(); st["n02"] != StateAlive {
		t.Fatalf("n02 %s, want alive", st["n02"])
	}
	fc.mu.Lock()
	fc.members[2].Age = 3 * time.Second
	fc.mu.Unlock()
	clk.Advance(time.Second)
	if st := state(); st["n02"] != StateSuspect {
		t.Fatalf("n02 %s, want suspect", st["n02"])
	}
	fc.mu.Lock()
	fc.members = append(fc.members[:2], fc.members[3:]...)
	fc.mu.Unlock()
	clk.Advance(time.Second)
	st := state()
	if st["n02"] != StateDead || len(st) != 4 {
		t.Fatalf("states %v, want n02 dead and 4 rows", st)
	}
	if page := get(t, s, "/cluster"); !strings.Contains(page, `class="member dead" data-node="n02"`) {
		t.Errorf("dead row not greyed: %s", page)
	}
	clk.Advance(11 * time.Minute)
	if st := state(); len(st) != 3 {
		t.Errorf("a dead node is forgotten after Forget: %v", st)
	}
}

// The partition's primary is the one announcing itself so in the highest
// epoch; lag and staleness against it.
func TestPrimaryEpochLagAndStaleness(t *testing.T) {
	parts := []client.PartitionInfo{{Service: "kv", Partition: 0, Level: 3, Replicas: []client.ReplicaInfo{
		{Node: "a", Role: "primary", Epoch: 1, Version: 50},                 // old primary, still announced
		{Node: "b", Role: "primary", Epoch: 2, Version: 60, VersionAgo: 55}, // new primary
		{Node: "c", Role: "secondary", Epoch: 2, Version: 52},
	}}, {Service: "kv", Partition: 1, Level: 2, Replicas: []client.ReplicaInfo{{Node: "a", Role: "recovering", Epoch: 1}}}}
	v := buildPartitions("x", time.Now(), Filter{Partition: -1}, parts, nil)
	p := v.Partitions[0]
	if p.Primary != "b" || p.Epoch != 2 {
		t.Fatalf("primary %q epoch %d, want b 2", p.Primary, p.Epoch)
	}
	if c := p.Replicas[2]; c.Lag != 8 || !c.Stale {
		t.Errorf("c: lag %d stale %v, want 8 and stale (52 < 55)", c.Lag, c.Stale)
	}
	if a := p.Replicas[0]; a.Lag != 10 || !a.Stale { // 50 < 55
		t.Errorf("a: lag %d stale %v", a.Lag, a.Stale)
	}
	if v.NoPrimary != 1 || v.Stale != 3 || p.LeaseMs != -1 || p.Lease() != "—" {
		t.Errorf("no primary %d, stale %d, lease %d", v.NoPrimary, v.Stale, p.LeaseMs)
	}
}

// Rates and recent percentiles come from the gatherings of successive
// requests.
func TestTrafficRatesAndPercentiles(t *testing.T) {
	clk := clock.NewManual(time.Unix(1e9, 0))
	reg, calls, lat := registry(t)
	s, _ := New(Config{Self: "n1", Gatherer: reg, Clock: clk})
	var tv TrafficView
	mustJSON(t, get(t, s, APIPrefix+"traffic"), &tv)
	if tv.WindowS != 0 || len(tv.Served) != 2 {
		t.Fatalf("first view: window %v, %d methods", tv.WindowS, len(tv.Served))
	}
	g := tv.Served[0]
	if g.Method != "get" || float64(g.Total) != 100 || g.P50Ms < 4 || g.P50Ms > 7 || g.P99Ms < 9 || g.P99Ms > 13.2 {
		t.Errorf("get since start: %+v", g)
	}
	if len(tv.Errors) != 1 || tv.Errors[0].Code != "overloaded" || len(tv.Queues) != 1 || float64(tv.Queues[0].Length) != 4 {
		t.Errorf("errors %+v queues %+v", tv.Errors, tv.Queues)
	}
	if tv.ChoicesNote == "" {
		t.Error("absent choice metric is not explained")
	}
	clk.Advance(2 * time.Second)
	for range 40 {
		calls.WithLabelValues("kv", "get", "ok").Inc()
		lat.WithLabelValues("kv", "get").Observe(0.020)
	}
	mustJSON(t, get(t, s, APIPrefix+"traffic"), &tv)
	g = tv.Served[0]
	if tv.WindowS != 2 || float64(g.Rate) != 20 || g.P50Ms < 15 || g.P50Ms > 26 {
		t.Errorf("window %v: get %+v, want 20/s with p50 near 20 ms", tv.WindowS, g)
	}
	var cv ClassesView
	mustJSON(t, get(t, s, APIPrefix+"classes"), &cv)
	if len(cv.Classes) != 1 || !cv.Classes[0].Below {
		t.Errorf("classes: %+v", cv.Classes)
	}
	var av AggregationView
	mustJSON(t, get(t, s, APIPrefix+"aggregation"), &av)
	if len(av.Called) != 1 || math.Abs(float64(av.Called[0].Coverage)-0.95) > 1e-9 {
		t.Errorf("aggregation: %+v", av.Called)
	}
}

func TestQuantileEmptyIsNaN(t *testing.T) {
	if q := quantile(0.5, nil, nil); !math.IsNaN(q) {
		t.Errorf("quantile of nothing: %v", q)
	}
	b, _ := json.Marshal(struct{ X Num }{nan})
	if string(b) != `{"X":null}` {
		t.Errorf("NaN encodes as %s", b)
	}
}

func TestTextScreenIsBounded(t *testing.T) {
	fc := newFakeCluster(64, 512)
	s, _ := New(Config{Self: "n00", Members: fc, Partitions: fc})
	var sc Screen
	cv, _ := s.View(context.Background(), "cluster", Filter{Partition: -1})
	pv, _ := s.View(context.Background(), "partitions", Filter{Partition: -1})
	sc.Cluster, sc.Partitions = cv.(ClusterView), pv.(PartitionsView)
	var b strings.Builder
	if err := WriteText(&b, sc, 10); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, "\n"); n > 40 {
		t.Errorf("%d lines for 10 rows per table:\n%s", n, out)
	}
	if !strings.Contains(out, "… 54 more") || !strings.Contains(out, "… 502 more") || !strings.Contains(out, "n00 *") {
		t.Errorf("cut tables not marked:\n%s", out)
	}
}

// The dashboard does no work while nobody watches: creating it and
// serving requests leaves no goroutine (and so no ticker) behind.
func TestNoWorkWithoutViewers(t *testing.T) {
	base := runtime.NumGoroutine()
	fc := newFakeCluster(8, 16)
	reg, _, _ := registry(t)
	s, _ := New(Config{Self: "n00", Members: fc, Loads: fc, Partitions: fc, Staleness: staleness, Gatherer: reg, RSS: PeerRSS{}})
	srv := httptest.NewServer(s)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 3 {
		for _, v := range Views {
			resp, err := hc.Get(srv.URL + "/" + v + "?fragment=1")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after the viewers left, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// A replica that stops being announced stays in its partition's row as
// gone, without counting as the primary or as stale.
func TestGoneReplicaStays(t *testing.T) {
	clk := clock.NewManual(time.Unix(1e9, 0))
	fc := newFakeCluster(3, 1)
	s, _ := New(Config{Self: "n01", Partitions: fc, Clock: clk})
	var pv PartitionsView
	mustJSON(t, get(t, s, APIPrefix+"partitions"), &pv)
	fc.mu.Lock()
	fc.parts[0].Replicas = fc.parts[0].Replicas[1:] // n00, the primary, is gone
	fc.parts[0].Replicas[0].Role, fc.parts[0].Replicas[0].Epoch = "primary", 2
	fc.mu.Unlock()
	clk.Advance(time.Second)
	mustJSON(t, get(t, s, APIPrefix+"partitions"), &pv)
	p := pv.Partitions[0]
	if p.Primary != "n01" || p.Epoch != 2 || len(p.Replicas) != 3 || p.Replicas[0].Role != RoleGone || pv.Stale != 0 {
		t.Errorf("after the primary left: %+v, %d stale", p, pv.Stale)
	}
	if page := get(t, s, "/partitions"); !strings.Contains(page, `class="rep gone" data-node="n00"`) {
		t.Error("gone replica not shown struck out")
	}
}

// /api/dashboard/ itself lists the JSON twins, and each path it lists
// answers.
func TestAPIIndexListsTheViews(t *testing.T) {
	s, err := New(Config{Self: "a", Role: "node"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + APIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var idx Index
	err = json.NewDecoder(resp.Body).Decode(&idx)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || idx.Self != "a" || len(idx.Views) != len(Views)+1 {
		t.Fatalf("%s %s: %s, %+v, %v", APIPrefix, resp.Status, resp.Header.Get("Content-Type"), idx, err)
	}
	for name, path := range idx.Views {
		r, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Errorf("%s (%s): %s", name, path, r.Status)
		}
	}
}
