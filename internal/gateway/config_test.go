package gateway

import (
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/gage"
)

const exampleConfig = `
listen: :8080
metrics: 127.0.0.1:9101
join: [127.0.0.1:7946]
max_body: 64KiB
timeout: 5s
max_wait: 500ms
scheduler: tag
unit: {cpu: 10ms, disk: 10ms, net: 2000}
capacity_grps: 400
subscribers:
  - name: shop
    reservation: 250
    rules: [{host: shop.example}]
  - name: partner
    reservation: 100
    limit: 200
    api_keys: [` + "%KEY%" + `]
routes:
  - path_prefix: /kv/
    methods: [GET]
    service: kv
    method: get
    partition: {segment: 2, count: 4}
  - path_prefix: /kv/
    methods: [PUT, POST]
    service: kv
    method: put
    partition: {hash: true, query: key, count: 4}
    subscribers: [partner]
  - host: shop.example
    service: web
    method: http
    passthrough: true
    partition: 0
`

func example() string { return strings.Replace(exampleConfig, "%KEY%", gage.HashKey("k1"), 1) }

func TestParseExampleConfig(t *testing.T) {
	c, err := ParseConfig([]byte(example()))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxBody != 64<<10 || time.Duration(c.MaxWait) != 500*time.Millisecond || c.Scheduler != "tag" || len(c.Routes) != 3 {
		t.Errorf("parsed %+v", c)
	}
	if f := c.Routes[2].Partition.Fixed; f == nil || *f != 0 {
		t.Errorf("partition: 0 is not fixed 0: %+v", c.Routes[2].Partition)
	}
	d := c.WithDefaults()
	if !*d.APIKey.Bearer || d.APIKey.Header != DefaultKeyHeader || time.Duration(d.Drain) != DefaultDrain {
		t.Errorf("defaults: %+v", d)
	}
	if got := c.Gage().UnitOrDefault().GRPS(c.CapacityVector()); got != 400 {
		t.Errorf("capacity %v GRPS, want 400", got)
	}
}

// The file in examples/ is what the docs point to: it must parse.
func TestExamplesGatewayYAMLParses(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "examples", "gateway.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Skip(err)
	}
	if _, err := ReadConfig(path); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ yaml, field string }{
		{"capacity_grps: 10\nroutes: [{service: s}]", "routes[0].method"},
		{"capacity_grps: 10\nroutes: [{method: m}]", "routes[0].service"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m}, {service: s, method: m, partition: {segment: 1, header: X}}]", "routes[1].partition"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, partition: {hash: true, query: k}}]", "routes[0].partition.count"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, partition: {hash: true}}]", "routes[0].partition.hash"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, partition: {segment: -1}}]", "routes[0].partition.segment"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, partition: {header: 'a b'}}]", "routes[0].partition.header"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, partition: {fixed: 4, count: 4}}]", "routes[0].partition.fixed"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, affinity: {header: X-K, query: k}}]", "routes[0].affinity"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, affinity: {header: 'a b'}}]", "routes[0].affinity.header"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, affinity: {segment: -2}}]", "routes[0].affinity.segment"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, methods: [get]}]", "routes[0].methods[0]"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, host: 'a/b'}]", "routes[0].host"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, path_prefix: x}]", "routes[0].path_prefix"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, subscribers: [nobody]}]", "routes[0].subscribers[0]"},
		{"capacity_grps: 10\nroutes: [{service: s, method: m, path_prefix: /a}, {service: t, method: m, path_prefix: /a}]", "routes[1]"},
		{"routes: [{service: s, method: m}]", "capacity_grps"},
		{"capacity_grps: 1\ncapacity: {cpu: 1s}\nroutes: [{service: s, method: m}]", "capacity_grps"},
		{"capacity_grps: 10\nscheduler: wfq\nroutes: [{service: s, method: m}]", "scheduler"},
		{"capacity_grps: 10\nmax_body: 1GiB\nroutes: [{service: s, method: m}]", "max_body"},
		{"capacity_grps: 10\nlisten: nope\nroutes: [{service: s, method: m}]", "listen"},
		{"capacity_grps: 10\ntls: {cert: c.pem}\nroutes: [{service: s, method: m}]", "tls"},
		{"capacity_grps: 10\nsubscribers: [{name: a, reservation: -1}]\nroutes: [{service: s, method: m}]", "subscribers[0].reservation"},
		{"capacity_grps: 10\nsubscribers: [{name: a, api_keys: [plain]}]\nroutes: [{service: s, method: m}]", "subscribers[0].api_keys[0]"},
		{"capacity_grps: 10\nsubscribers: [{name: a, reservation: 8}, {name: b, reservation: 5}]\nroutes: [{service: s, method: m}]", "subscribers"},
		{"capacity_grps: 10", "routes"},
	} {
		_, err := ParseConfig([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.field+": ") {
			t.Errorf("%q: err = %v, want one naming %s", tc.yaml, err, tc.field)
		}
	}
	// Overbooking names the subscribers that do not fit.
	_, err := ParseConfig([]byte("capacity_grps: 10\nsubscribers: [{name: a, reservation: 8}, {name: b, reservation: 5}]\nroutes: [{service: s, method: m}]"))
	if err == nil || !strings.Contains(err.Error(), "not covered: b") {
		t.Errorf("overbooked: %v", err)
	}
	var fe *gage.FieldError
	if !errors.As(err, &fe) {
		t.Errorf("%T is not a *gage.FieldError", err)
	}
	for _, y := range []string{"nope: 1", "capacity_grps: x", "timeout: soon", "max_body: lots", "routes: [{partition: a}]"} {
		if _, err := ParseConfig([]byte(y)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v, want a decoding error with its line", y, err)
		}
	}
}

func routesOf(t *testing.T, y string) *routeTable {
	t.Helper()
	c, err := ParseConfig([]byte("capacity_grps: 10\n" + y))
	if err != nil {
		t.Fatal(err)
	}
	return newRouteTable(c.Routes, time.Second)
}

func TestRouteMatchMostSpecific(t *testing.T) {
	rt := routesOf(t, `routes:
  - {service: any, method: m}
  - {service: api, method: m, path_prefix: /api}
  - {service: apiv2, method: m, path_prefix: /api/v2/}
  - {service: wild, method: m, host: "*.example.com"}
  - {service: wildeu, method: m, host: "*.eu.example.com"}
  - {service: exact, method: m, host: www.example.com}
  - {service: get, method: get, path_prefix: /kv, methods: [GET]}
  - {service: put, method: put, path_prefix: /kv, methods: [PUT]}
  - {service: ro, method: m, path_prefix: /ro, methods: [GET]}
`)
	for _, tc := range []struct{ host, path, method, want string }{
		{"x.org", "/", "GET", "any"},
		{"x.org", "/api", "POST", "api"},
		{"x.org", "/api/x", "GET", "api"},
		{"x.org", "/apis", "GET", "any"},
		{"x.org", "/api/v2/x", "GET", "apiv2"},
		{"a.example.com", "/api", "GET", "wild"},
		{"A.EU.example.com:8443", "/", "GET", "wildeu"},
		{"example.com", "/", "GET", "any"},
		{"www.example.com.", "/", "GET", "exact"},
		{"x.org", "/kv/3", "GET", "get"},
		{"x.org", "/kv/3", "HEAD", "get"},
		{"x.org", "/kv/3", "PUT", "put"},
		{"x.org", "/kv/3", "DELETE", "any"}, // falls through to the catch-all
	} {
		r, _ := rt.match(tc.host, tc.path, tc.method)
		if r == nil || r.Service != tc.want {
			t.Errorf("%s %s%s -> %v, want %s", tc.method, tc.host, tc.path, r, tc.want)
		}
	}
	only := routesOf(t, "routes: [{service: ro, method: m, path_prefix: /ro, methods: [GET, POST]}]")
	if r, allow := only.match("h", "/ro/x", "DELETE"); r != nil || strings.Join(allow, ",") != "GET,POST" {
		t.Errorf("DELETE /ro: %v allow %v, want none with GET,POST", r, allow)
	}
	if r, allow := only.match("h", "/other", "GET"); r != nil || allow != nil {
		t.Errorf("GET /other: %v allow %v, want nothing", r, allow)
	}
}

func req(t *testing.T, target string, h http.Header) *http.Request {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		h = http.Header{}
	}
	return &http.Request{Method: "GET", URL: u, Header: h, Host: "h"}
}

// An affinity key comes from any source; a request without one is
// balanced as any (""), one given twice is the client's mistake.
func TestAffinityKeyFromEverySource(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec AffinitySpec
		r    *http.Request
		want string
		bad  bool
	}{
		{"none", AffinitySpec{}, req(t, "/cache/k1", nil), "", false},
		{"segment", AffinitySpec{Segment: 2}, req(t, "/cache/k%2F1", nil), "k/1", false},
		{"segment missing", AffinitySpec{Segment: 3}, req(t, "/cache/k1", nil), "", false},
		{"header", AffinitySpec{Header: "X-Cache-Key"}, req(t, "/", http.Header{"X-Cache-Key": {"k1"}}), "k1", false},
		{"header missing", AffinitySpec{Header: "X-Cache-Key"}, req(t, "/", nil), "", false},
		{"header twice", AffinitySpec{Header: "X-Cache-Key"}, req(t, "/", http.Header{"X-Cache-Key": {"a", "b"}}), "", true},
		{"query", AffinitySpec{Query: "key"}, req(t, "/?key=k1", nil), "k1", false},
		{"query bad escape", AffinitySpec{Query: "key"}, req(t, "/?key=%zz", nil), "", true},
	} {
		got, err := tc.spec.key(tc.r)
		switch {
		case tc.bad && !errors.Is(err, errBadKey):
			t.Errorf("%s: %q, %v; want errBadKey", tc.name, got, err)
		case !tc.bad && (err != nil || got != tc.want):
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// TestRouteBalancePerService: a route's balance is its service's policy
// (the gateway client's ServiceBalance); a service one route reads an
// affinity key of balances by affinity; others keep the default.
func TestRouteBalancePerService(t *testing.T) {
	c, err := ParseConfig([]byte(`capacity_grps: 10
routes:
  - {path_prefix: /kv/, service: kv, method: get, balance: polling}
  - {path_prefix: /kv/, methods: [PUT], service: kv, method: put}
  - {path_prefix: /cache/, service: pcache, method: CacheLookup, affinity: {segment: 2}}
  - {path_prefix: /cache/, methods: [PUT], service: pcache, method: CacheStore, balance: affinity}
  - {path_prefix: /feed/, service: feed, method: get, affinity: {query: user}}
  - {path_prefix: /, service: web, method: http}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Balancing()
	want := map[string]string{"kv": "polling", "pcache": "affinity", "feed": "affinity"}
	if len(got) != len(want) {
		t.Errorf("Balancing() = %v, want %v (web: the default)", got, want)
	}
	for svc, p := range want {
		if got[svc] != (balance.Config{Policy: p}) {
			t.Errorf("Balancing()[%s] = %+v, want policy %s", svc, got[svc], p)
		}
	}
	for _, tc := range []struct{ routes, field, says string }{
		{"[{service: s, method: m, balance: sticky}]", "routes[0].balance", `unknown balancing policy "sticky"`},
		{"[{service: s, method: m, balance: polling}, {service: s, method: n, path_prefix: /n, balance: random}]", "routes[1].balance", `routes[0].balance names "polling"`},
		{"[{service: s, method: m, balance: polling}, {service: s, method: n, path_prefix: /n, affinity: {query: k}}]", "routes[1].affinity", "ignores affinity keys"},
	} {
		_, err := ParseConfig([]byte("capacity_grps: 10\nroutes: " + tc.routes))
		if err == nil || !strings.Contains(err.Error(), tc.field+": ") || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error naming %s that says %s", tc.routes, err, tc.field, tc.says)
		}
	}
}

func TestPartitionFromEverySource(t *testing.T) {
	fixed := 3
	hashOf := func(src PartitionSpec, r *http.Request) int {
		t.Helper()
		p, err := src.partition(r)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		spec PartitionSpec
		r    *http.Request
		want int
		bad  bool
	}{
		{"none", PartitionSpec{}, req(t, "/x", nil), 0, false},
		{"fixed", PartitionSpec{Fixed: &fixed}, req(t, "/x", nil), 3, false},
		{"segment", PartitionSpec{Segment: 2}, req(t, "/kv/7/k", nil), 7, false},
		{"segment escaped", PartitionSpec{Segment: 3}, req(t, "/kv/a%2Fb/12", nil), 12, false},
		{"segment missing", PartitionSpec{Segment: 4}, req(t, "/kv/7", nil), 0, true},
		{"segment empty", PartitionSpec{Segment: 2}, req(t, "/kv//x", nil), 0, true},
		{"segment not a number", PartitionSpec{Segment: 1}, req(t, "/x", nil), 0, true},
		{"segment negative", PartitionSpec{Segment: 1}, req(t, "/-1", nil), 0, true},
		{"segment signed", PartitionSpec{Segment: 1}, req(t, "/+1", nil), 0, true},
		{"segment too big", PartitionSpec{Segment: 1}, req(t, "/2147483648", nil), 0, true},
		{"segment over count", PartitionSpec{Segment: 1, Count: 4}, req(t, "/4", nil), 0, true},
		{"header", PartitionSpec{Header: "X-Part"}, req(t, "/", http.Header{"X-Part": {"5"}}), 5, false},
		{"header missing", PartitionSpec{Header: "X-Part"}, req(t, "/", nil), 0, true},
		{"header twice", PartitionSpec{Header: "X-Part"}, req(t, "/", http.Header{"X-Part": {"1", "2"}}), 0, true},
		{"query", PartitionSpec{Query: "p"}, req(t, "/?p=9&q=1", nil), 9, false},
		{"query missing", PartitionSpec{Query: "p"}, req(t, "/?q=1", nil), 0, true},
		{"query twice", PartitionSpec{Query: "p"}, req(t, "/?p=1&p=2", nil), 0, true},
		{"query bad escape", PartitionSpec{Query: "p"}, req(t, "/?p=%zz", nil), 0, true},
		{"hash header missing", PartitionSpec{Hash: true, Header: "X-User", Count: 8}, req(t, "/", nil), 0, true},
	} {
		got, err := tc.spec.partition(tc.r)
		switch {
		case tc.bad && !errors.Is(err, errBadKey):
			t.Errorf("%s: %d, %v; want errBadKey", tc.name, got, err)
		case !tc.bad && (err != nil || got != tc.want):
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
	// A hashed key lands in [0, count), the same for the same key from any
	// source, and keys spread.
	seen := map[int]bool{}
	for _, user := range []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"} {
		a := hashOf(PartitionSpec{Hash: true, Query: "user", Count: 4}, req(t, "/?user="+user, nil))
		b := hashOf(PartitionSpec{Hash: true, Header: "X-User", Count: 4}, req(t, "/", http.Header{"X-User": {user}}))
		c := hashOf(PartitionSpec{Hash: true, Segment: 2, Count: 4}, req(t, "/u/"+user+"/x", nil))
		if a != b || b != c || a < 0 || a >= 4 {
			t.Errorf("%s: query %d header %d segment %d", user, a, b, c)
		}
		seen[a] = true
	}
	if len(seen) < 2 {
		t.Errorf("8 keys all hash to %v", seen)
	}
}

// The config parser never panics, and whatever it accepts builds a route
// table that routes.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(example()))
	f.Add([]byte("capacity_grps: 10\nroutes: [{service: s, method: m, partition: {hash: true, header: X, count: 3}}]"))
	f.Add([]byte("capacity: {cpu: 1s, net: 1MiB}\nroutes: [{service: s, method: m, host: '*.a.b', path_prefix: /x/}]"))
	f.Add([]byte("routes: [{partition: 7}]"))
	f.Add([]byte("capacity_grps: 10\nroutes: [{service: pcache, method: CacheLookup, affinity: {query: key}}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if err := c.WithDefaults().Validate(); err != nil {
			t.Fatalf("valid config invalid with defaults: %v", err)
		}
		rt := newRouteTable(c.Routes, time.Second)
		for _, r := range c.Routes {
			path := r.PathPrefix
			if path == "" {
				path = "/"
			}
			host := strings.TrimPrefix(r.Host, "*.")
			if strings.HasPrefix(r.Host, "*.") {
				host = "x." + host
			}
			method := "GET"
			if len(r.Methods) > 0 {
				method = r.Methods[0]
			}
			if got, _ := rt.match(host, path, method); got == nil {
				t.Fatalf("route %+v does not match its own host, prefix and method", r)
			}
		}
	})
}

// Partition extraction never panics, and its answer is in range or a bad
// key.
func FuzzPartitionKey(f *testing.F) {
	f.Add("/kv/7/x", "5", "p=3", 2, 0, false)
	f.Add("/u/alice", "bob", "user=carol", 2, 16, true)
	f.Add("/%zz/", "", "%zz", 1, 1, true)
	f.Fuzz(func(t *testing.T, path, header, query string, segment, count int, hash bool) {
		u, err := url.ParseRequestURI(path)
		if err != nil {
			return
		}
		u.RawQuery = query
		r := &http.Request{URL: u, Header: http.Header{"X-Key": {header}}}
		count = max(0, count%64)
		specs := []PartitionSpec{
			{Segment: max(1, segment%8), Hash: hash, Count: count},
			{Header: "X-Key", Hash: hash, Count: count},
			{Query: "p", Hash: hash, Count: count},
		}
		for _, s := range specs {
			if s.Hash && s.Count == 0 {
				s.Count = 1
			}
			p, err := s.partition(r)
			if err != nil {
				if !errors.Is(err, errBadKey) {
					t.Fatalf("%+v: error %v is not a bad key", s, err)
				}
				continue
			}
			if p < 0 || p > maxPartition || (s.Count > 0 && p >= s.Count) {
				t.Fatalf("%+v: partition %d out of range", s, p)
			}
			if again, _ := s.partition(r); again != p {
				t.Fatalf("%+v: %d then %d", s, p, again)
			}
		}
		for _, a := range []AffinitySpec{{Segment: max(1, segment%8)}, {Header: "X-Key"}, {Query: "p"}} {
			k, err := a.key(r)
			if err != nil && !errors.Is(err, errBadKey) {
				t.Fatalf("%+v: error %v is not a bad key", a, err)
			}
			if again, err2 := a.key(r); again != k || (err == nil) != (err2 == nil) {
				t.Fatalf("%+v: %q, %v then %q, %v", a, k, err, again, err2)
			}
		}
	})
}
