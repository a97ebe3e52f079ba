package gateway

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/version"
)

// call is one call a fakeCaller received.
type call struct {
	service, method string
	partition       int
	body            string
}

// fakeCaller stands for the cluster: answer decides each call's outcome
// (by default the body comes back).
type fakeCaller struct {
	mu     sync.Mutex
	calls  []call
	answer func(ctx context.Context, c call) (*neptune.Response, error)
}

func (f *fakeCaller) Call(ctx context.Context, service string, partition int, method string, body []byte, _ ...neptune.CallOption) (*neptune.Response, error) {
	c := call{service, method, partition, string(body)}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	if f.answer != nil {
		return f.answer(ctx, c)
	}
	return &neptune.Response{Body: body}, nil
}

func (f *fakeCaller) log() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// start builds a gateway from YAML and runs its loop for the test.
func start(t testing.TB, y string, c Caller, clk clock.Clock) (*Gateway, *prometheus.Registry) {
	t.Helper()
	return startWith(t, y, c, clk, nil)
}

// startWith is start with the gossip security sec (nil: the test
// cluster's, for the config's name or "a").
func startWith(t testing.TB, y string, c Caller, clk clock.Clock, sec *GossipSecurity) (*Gateway, *prometheus.Registry) {
	t.Helper()
	cfg, err := ParseConfig([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if sec == nil {
		s := testGossip(t, cmp.Or(cfg.Name, "a"))
		sec = &s
	}
	reg := prometheus.NewRegistry()
	g, err := New(cfg, Deps{Caller: c, Clock: clk, Registerer: reg, Gossip: *sec})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return g, reg
}

// do serves one request in process.
func do(g *Gateway, method, target string, h http.Header, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for k, vs := range h {
		r.Header[k] = vs
	}
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	return w
}

func key(k string) http.Header { return http.Header{"X-Api-Key": {k}} }

var statusConfig = `
capacity_grps: 1000
max_body: 16
subscribers:
  - {name: gold, reservation: 10, api_keys: [` + gage.HashKey("gold-key") + `]}
  - {name: silver, reservation: 10, api_keys: [` + gage.HashKey("silver-key") + `]}
routes:
  - {path_prefix: /kv, methods: [GET], service: kv, method: get, partition: {segment: 2, count: 4}}
  - {path_prefix: /kv, methods: [PUT], service: kv, method: put, partition: {segment: 2, count: 4}}
  - {path_prefix: /gold, service: kv, method: get, subscribers: [gold]}
  - {path_prefix: /err, service: err, method: m, partition: {query: e}}
`

// Every status code the gateway answers with, on a fake cluster.
func TestStatusCodes(t *testing.T) {
	errs := []error{
		0: nil,
		1: fmt.Errorf("%w %q", neptune.ErrUnknownService, "x"),
		2: fmt.Errorf("%w %q", neptune.ErrUnknownMethod, "x"),
		3: neptune.ErrUnknownPartition,
		4: neptune.ErrNoReplica,
		5: neptune.ErrNoPrimary,
		6: neptune.ErrOverloaded,
		7: neptune.ErrDeadline,
		8: errors.New("kv: key not found"),
		9: neptune.ErrWrongMode,
		// The handler's own errors, as they come back from a node.
		10: &transport.RemoteError{Node: "n1", Message: "kv: malformed request: put wants key=value", Kind: neptune.ErrBadRequest},
		11: &transport.RemoteError{Node: "n1", Message: "kv: key not found: \"k\"", Kind: neptune.ErrNotFound},
		12: &transport.RemoteError{Node: "n1", Message: "disk on fire"},
	}
	f := &fakeCaller{answer: func(_ context.Context, c call) (*neptune.Response, error) {
		if c.service == "err" {
			return nil, errs[c.partition]
		}
		return &neptune.Response{Body: []byte(fmt.Sprintf("%s %s p%d %s", c.service, c.method, c.partition, c.body))}, nil
	}}
	g, _ := start(t, statusConfig, f, nil)

	w := do(g, "GET", "/kv/3/x", nil, "")
	if w.Code != 200 || w.Body.String() != "kv get p3 " || w.Header().Get("Content-Type") != "application/octet-stream" {
		t.Errorf("GET /kv/3: %d %q", w.Code, w.Body)
	}
	if w := do(g, "PUT", "/kv/1", key("gold-key"), "k=v"); w.Code != 200 || w.Body.String() != "kv put p1 k=v" {
		t.Errorf("PUT /kv/1: %d %q", w.Code, w.Body)
	}
	for _, tc := range []struct {
		name, method, target string
		h                    http.Header
		body                 string
		code                 int
		header, value        string
	}{
		{"no route", "GET", "/nothing", nil, "", 404, "", ""},
		{"method not routed", "DELETE", "/kv/1", nil, "", 405, "Allow", "GET, PUT"},
		{"unknown key", "GET", "/kv/1", key("nope"), "", 401, "WWW-Authenticate", `Bearer realm="neptune"`},
		{"unknown bearer", "GET", "/kv/1", http.Header{"Authorization": {"Bearer nope"}}, "", 401, "", ""},
		{"no key on a keyed route", "GET", "/gold", nil, "", 401, "", ""},
		{"key not authorised", "GET", "/gold", key("silver-key"), "", 403, "", ""},
		{"bad partition", "GET", "/kv/x", nil, "", 400, "", ""},
		{"partition over count", "GET", "/kv/4", nil, "", 400, "", ""},
		{"body too large", "PUT", "/kv/1", nil, strings.Repeat("x", 17), 413, "", ""},
		{"unknown service", "GET", "/err?e=1", nil, "", 404, "", ""},
		{"unknown method", "GET", "/err?e=2", nil, "", 404, "", ""},
		{"unknown partition", "GET", "/err?e=3", nil, "", 404, "", ""},
		{"no replica", "GET", "/err?e=4", nil, "", 503, "Retry-After", "1"},
		{"no primary", "GET", "/err?e=5", nil, "", 503, "Retry-After", "1"},
		{"overloaded", "GET", "/err?e=6", nil, "", 503, "Retry-After", "1"},
		{"deadline", "GET", "/err?e=7", nil, "", 504, "", ""},
		{"service failed", "GET", "/err?e=8", nil, "", 502, "", ""},
		{"stream method", "GET", "/err?e=9", nil, "", 502, "", ""},
	} {
		w := do(g, tc.method, tc.target, tc.h, tc.body)
		if w.Code != tc.code || (tc.header != "" && w.Header().Get(tc.header) != tc.value) {
			t.Errorf("%s: %d %s=%q %q; want %d %s=%q", tc.name, w.Code, tc.header, w.Header().Get(tc.header), w.Body, tc.code, tc.header, tc.value)
		}
		if strings.Contains(w.Body.String(), "nope") {
			t.Errorf("%s: the answer echoes the key: %q", tc.name, w.Body)
		}
	}
	// A handler's own error is answered with its words, by its kind, and
	// never with the node it came from.
	for _, tc := range []struct {
		target string
		code   int
		body   string
	}{
		{"/err?e=10", 400, "kv: malformed request: put wants key=value"},
		{"/err?e=11", 404, "kv: key not found: \"k\""},
		{"/err?e=12", 502, "the service failed: disk on fire"},
	} {
		// The request id the caller sent is the one the answer names.
		want := tc.body + " (request_id req-" + tc.target[len(tc.target)-2:] + ")\n"
		w := do(g, "GET", tc.target, http.Header{"X-Request-Id": {"req-" + tc.target[len(tc.target)-2:]}}, "")
		if w.Code != tc.code || w.Body.String() != want || w.Header().Get("X-Request-Id") != "req-"+tc.target[len(tc.target)-2:] {
			t.Errorf("%s: %d %q X-Request-Id %q; want %d %q", tc.target, w.Code, w.Body, w.Header().Get("X-Request-Id"), tc.code, want)
		}
	}
	// An id that could forge a header or a log line is replaced.
	if w := do(g, "GET", "/err?e=10", http.Header{"X-Request-Id": {"a b\"c"}}, ""); w.Header().Get("X-Request-Id") == "a b\"c" || len(w.Header().Get("X-Request-Id")) != 32 {
		t.Errorf("invalid X-Request-Id answered with %q; want a new 32-hex id", w.Header().Get("X-Request-Id"))
	}
	if w := do(g, "GET", "/gold", http.Header{"Authorization": {"bearer gold-key"}}, ""); w.Code != 200 {
		t.Errorf("bearer key: %d %q", w.Code, w.Body)
	}
}

// readSpy fails the test if the body is read at all.
type readSpy struct{ read bool }

func (s *readSpy) Read([]byte) (int, error) { s.read = true; return 0, io.EOF }

// A declared Content-Length over the limit is refused before reading; an
// undeclared (chunked) one is cut off at the limit.
func TestBodyLimit(t *testing.T) {
	g, _ := start(t, statusConfig, &fakeCaller{}, nil)
	spy := &readSpy{}
	r := httptest.NewRequest("PUT", "/kv/1", spy)
	r.ContentLength = 1 << 30
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != 413 || spy.read {
		t.Errorf("declared 1 GiB: %d, body read %v", w.Code, spy.read)
	}
	r = httptest.NewRequest("PUT", "/kv/1", io.MultiReader(strings.NewReader(strings.Repeat("x", 10)), strings.NewReader(strings.Repeat("y", 10))))
	r.ContentLength = -1
	w = httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != 413 {
		t.Errorf("chunked 20 bytes over a 16-byte limit: %d", w.Code)
	}
	if w := do(g, "PUT", "/kv/1", nil, strings.Repeat("x", 16)); w.Code != 200 {
		t.Errorf("16 bytes at a 16-byte limit: %d", w.Code)
	}
}

// Classification: the API key names who pays; otherwise Host and path
// rules; otherwise the default subscriber. Passthrough carries the
// request as it came, less the key, plus who it was classified to.
func TestClassificationAndPassthrough(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	f := &fakeCaller{answer: func(_ context.Context, c call) (*neptune.Response, error) {
		r, body, err := adapter.UnmarshalRequest([]byte(c.body))
		if err != nil {
			return nil, err
		}
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		h := http.Header{"X-Program": {"yes"}, "Connection": {"close"}}
		return &neptune.Response{Body: adapter.MarshalResponse(http.StatusCreated, h, append([]byte("got "), body...))}, nil
	}}
	g, reg := start(t, `
capacity_grps: 1000
subscribers:
  - {name: shop, reservation: 10, rules: [{host: shop.example}]}
  - {name: api, reservation: 10, rules: [{path_prefix: /api}]}
  - {name: partner, reservation: 10, api_keys: [`+gage.HashKey("p-key")+`]}
routes:
  - {service: web, method: http, passthrough: true, partition: {hash: true, header: X-User, count: 8}}
`, f, nil)
	send := func(host, target string, h http.Header) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", target, strings.NewReader("body"))
		r.Host = host
		r.Header = h
		r.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}
	for _, tc := range []struct {
		host, target string
		h            http.Header
		want         string
	}{
		{"shop.example", "/a%2Fb/c?x=1", http.Header{"Cookie": {"s=1"}}, "shop"},
		{"other.example", "/api/v1", http.Header{}, "api"},
		{"shop.example", "/", http.Header{"X-Api-Key": {"p-key"}, "Neptune-Subscriber": {"forged"}}, "partner"},
		{"shop.example", "/", http.Header{"Authorization": {"Bearer p-key"}}, "partner"},
		{"other.example", "/", http.Header{}, gage.DefaultName},
	} {
		w := send(tc.host, tc.target, tc.h)
		if w.Code != http.StatusCreated || w.Body.String() != "got body" || w.Header().Get("X-Program") != "yes" || w.Header().Get("Connection") != "" {
			t.Errorf("%s%s: %d %v %q", tc.host, tc.target, w.Code, w.Header(), w.Body)
			continue
		}
		mu.Lock()
		r := seen[len(seen)-1]
		mu.Unlock()
		if got := r.Header.Get(HeaderSubscriber); got != tc.want {
			t.Errorf("%s%s classified to %q, want %q", tc.host, tc.target, got, tc.want)
		}
		if r.Header.Get("X-Api-Key") != "" || r.Header.Get("Authorization") != "" {
			t.Errorf("the API key was forwarded: %v", r.Header)
		}
		if r.Method != "POST" || r.RequestURI != tc.target || r.Host != tc.host || r.Header.Get("X-Forwarded-Host") != tc.host || r.Header.Get("X-Forwarded-For") == "" {
			t.Errorf("forwarded %s %s host %s headers %v", r.Method, r.RequestURI, r.Host, r.Header)
		}
	}
	calls := f.log()
	for _, c := range calls {
		if c.partition != calls[0].partition {
			t.Errorf("X-User alice hashed to partitions %d and %d", calls[0].partition, c.partition)
		}
	}
	if got := value(t, reg, "neptune_gateway_demanded_total", "subscriber", "partner"); got != 2 {
		t.Errorf("partner demanded %v, want 2", got)
	}
	if n := series(t, reg, "neptune_gateway_reserved_grps") + series(t, reg, "neptune_gateway_queue_length") + series(t, reg, "neptune_gateway_dropped_total"); n != 4+4+12 {
		t.Errorf("per-subscriber series: %d, want 4 reserved, 4 queue lengths and 12 dropped", n)
	}
}

// queued waits until the loop shows n requests of sub queued, every
// dispatch due by the clock's time made. It polls the loop (each poll is
// a round trip to it), never sleeps.
func queued(t *testing.T, g *Gateway, sub string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		for _, q := range g.loop.queues(ctx) {
			if q.Subscriber == sub && q.Len == n {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never had %d queued", sub, n)
		}
		runtime.Gosched()
	}
}

type result struct {
	who  string
	code int
	ra   string
}

// The scheduler loop on a manual clock: a subscriber flooding past its
// reservation fills its queue and is answered 429 with Retry-After, while
// a request of a subscriber within its reservation is served before any of
// the flood's queued ones.
//
// Each request moves 1,000 bytes (the response) and the unit is 1,000
// bytes of network, so a request costs one generic request; the capacity
// of 10 GRPS starts with a budget of one request (100 ms of it).
func TestFloodingSubscriberGets429WhileReservedIsServed(t *testing.T) {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &fakeCaller{answer: func(_ context.Context, c call) (*neptune.Response, error) {
		return &neptune.Response{Body: bytes.Repeat([]byte{'x'}, 1000)}, nil
	}}
	g, reg := start(t, `
capacity_grps: 10
unit: {net: 1000}
queue: 3
max_wait: 10s
timeout: 20s
subscribers:
  - {name: gold, reservation: 5, api_keys: [`+gage.HashKey("gold")+`]}
  - {name: flood, reservation: 1, api_keys: [`+gage.HashKey("flood")+`]}
routes: [{service: s, method: m}]
`, f, clk)
	results := make(chan result, 32)
	send := func(who string) {
		w := do(g, "POST", "/", key(who), who)
		results <- result{who, w.Code, w.Header().Get("Retry-After")}
	}
	const n = 10
	for range n {
		go send("flood")
	}
	// At most two go at once (the initial budget), three wait in the
	// queue: at least five are refused at once.
	refused := 0
	for refused+3 < n-2 {
		r := <-results
		switch {
		case r.code == 429 && r.ra == "1":
			refused++
		case r.code == 200:
		default:
			t.Fatalf("flood: %+v", r)
		}
	}
	queued(t, g, "flood", 3)
	go send("gold")
	// Gold goes at once (its reservation may run ahead of the capacity
	// the flood's dispatches spent) or waits in its queue for time to
	// move; then time moves in 10 ms steps until gold is answered. None
	// of the flood's queued requests may go before it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gold, waiting := false, false
	for !gold && !waiting {
		select {
		case r := <-results:
			gold = r.who == "gold" && r.code == 200
			if r.who == "gold" && !gold || r.code != 429 && r.code != 200 {
				t.Fatalf("%+v", r)
			}
		case <-ctx.Done():
			t.Fatal("gold neither answered nor queued")
		default:
		}
		for _, q := range g.loop.queues(context.Background()) {
			waiting = waiting || q.Subscriber == "gold" && q.Len == 1
		}
		runtime.Gosched()
	}
	for !gold {
		select {
		case r := <-results:
			switch {
			case r.who == "gold" && r.code == 200:
				gold = true
			case r.who == "gold" || r.code != 429 && r.code != 200:
				t.Fatalf("%+v", r)
			}
		case <-ctx.Done():
			t.Fatal("gold never answered")
		default:
		}
		// One snapshot of the queues: while gold still waits in its
		// queue, the flood's must not shrink. (Once gold is dispatched,
		// spare capacity may serve the flood in the same tick, before
		// gold's answer reaches this loop.)
		qs := g.loop.queues(context.Background())
		goldWaits := slices.ContainsFunc(qs, func(q gage.QueueState) bool { return q.Subscriber == "gold" && q.Len == 1 })
		for _, q := range qs {
			if goldWaits && q.Subscriber == "flood" && q.Len != 3 {
				t.Fatalf("the flood's queue went from 3 to %d while gold waited", q.Len)
			}
		}
		clk.Advance(10 * time.Millisecond)
		runtime.Gosched()
	}
	if got := value(t, reg, "neptune_gateway_dropped_total", "subscriber", "flood", "reason", dropQueueFull); got < 5 {
		t.Errorf("flood dropped (queue full) %v, want >= 5", got)
	}
	if got := value(t, reg, "neptune_gateway_dropped_total", "subscriber", "gold", "reason", dropQueueFull); got != 0 {
		t.Errorf("gold dropped %v", got)
	}
	// The ratios an operator alerts on: the flood was refused in part,
	// gold never.
	if got := value(t, reg, "neptune_gateway_dropped_ratio", "subscriber", "flood"); got <= 0 || got > 1 {
		t.Errorf("flood's dropped ratio %v, want in (0, 1]", got)
	}
	if got := value(t, reg, "neptune_gateway_dropped_ratio", "subscriber", "gold"); got != 0 {
		t.Errorf("gold's dropped ratio %v, want 0", got)
	}
	if got := value(t, reg, "neptune_gateway_served_ratio", "subscriber", "gold"); got != 1 {
		t.Errorf("gold's served ratio %v, want 1 (its one request)", got)
	}
	if got := value(t, reg, "neptune_build_info", "version", version.Release); got != 1 {
		t.Errorf("neptune_build_info{version=%q} = %v, want 1", version.Release, got)
	}
}

// A request whose turn does not come within max_wait is answered 429; one
// whose deadline passes first, 504. The capacity (1 GRPS, one request's
// budget spent at once) gives no turn for 900 ms.
func TestWaitBoundAndDeadline(t *testing.T) {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &fakeCaller{answer: func(_ context.Context, c call) (*neptune.Response, error) {
		return &neptune.Response{Body: bytes.Repeat([]byte{'x'}, 1000)}, nil
	}}
	g, reg := start(t, `
capacity_grps: 1
unit: {net: 1000}
max_wait: 250ms
subscribers:
  - {name: a, reservation: 0.5}
routes:
  - {service: s, method: m}
  - {path_prefix: /short, service: s, method: m, timeout: 100ms}
`, f, clk)
	results := make(chan result, 8)
	send := func(target string) {
		w := do(g, "GET", target, nil, "")
		results <- result{target, w.Code, w.Header().Get("Retry-After")}
	}
	go send("/")
	if r := <-results; r.code != 200 {
		t.Fatalf("first request: %+v", r)
	}
	go send("/")
	go send("/")
	queued(t, g, gage.DefaultName, 2)
	clk.Advance(250 * time.Millisecond)
	for range 2 {
		if r := <-results; r.code != 429 || r.ra != "1" {
			t.Errorf("past the wait bound: %+v, want 429 with Retry-After", r)
		}
	}
	if v := value(t, reg, "neptune_gateway_queue_length", "subscriber", gage.DefaultName); v != 0 {
		t.Errorf("queue length gauge %v after both gave up, want 0", v)
	}
	// The two refused leave the scheduler at once, with no turn: left
	// queued until their turn, they would count in the schedulers'
	// shares of the spare as if served. The clock does not move, so
	// only the cancellation can empty the queue.
	queued(t, g, gage.DefaultName, 0)
	go send("/short")
	queued(t, g, gage.DefaultName, 1)
	clk.Advance(100 * time.Millisecond)
	if r := <-results; r.code != 504 {
		t.Errorf("past the deadline while queued: %+v, want 504", r)
	}
	queued(t, g, gage.DefaultName, 0)
	if n := len(f.log()); n != 1 {
		t.Errorf("%d calls, want only the first", n)
	}
	clk.Advance(2 * time.Second)
	if got := value(t, reg, "neptune_gateway_dropped_total", "subscriber", gage.DefaultName, "reason", dropOverShare); got != 2 {
		t.Errorf("dropped (wait) %v, want 2", got)
	}
	if got := value(t, reg, "neptune_gateway_dropped_total", "subscriber", gage.DefaultName, "reason", dropDeadline); got != 1 {
		t.Errorf("dropped (deadline) %v, want 1", got)
	}
	if got := value(t, reg, "neptune_gateway_served_gru_total", "subscriber", gage.DefaultName); got != 1 {
		t.Errorf("served %v GRU, want 1 (one request of 1000 bytes)", got)
	}
}

// value is the value of the counter or gauge name with labels (name,
// value pairs) in reg.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

// series counts the series of metric name in reg.
func series(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}
