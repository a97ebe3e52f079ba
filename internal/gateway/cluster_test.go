package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
	"github.com/neptune-cluster/neptune/apps/echo"
	"github.com/neptune-cluster/neptune/internal/gage"
)

// startNode starts one in-process Neptune node hosting svcs (each on
// partitions 0 and 1) and waits until its own client sees them.
func startNode(t *testing.T, svcs ...neptune.Service) *neptune.Node {
	t.Helper()
	nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: "n0", AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		if err := nd.Register(s, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close() })
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ms := nd.Client().Members(ctx, 50*time.Millisecond)
		if len(ms) == 1 && len(ms[0].Services) >= len(svcs) {
			return nd
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node never saw its own services: %+v", ms)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The status codes that come from a real cluster: an in-process node with
// echo, a service that waits out every deadline, one with a one-request
// queue, and an unmodified web program behind the HTTP adapter exposed
// transparently.
func TestThroughAnInProcessNode(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Path", r.URL.RequestURI())
		w.Header().Set("X-Seen-Partition", r.Header.Get(adapter.HeaderPartition))
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s host=%s body=%s", r.Method, r.URL.Path, r.Host, b)
	}))
	defer web.Close()
	websvc, err := adapter.NewHTTP("web", adapter.HTTPConfig{BaseURL: web.URL, Methods: []adapter.MethodConfig{
		{Name: "http", Mode: "read", Passthrough: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	running := make(chan struct{}, 8)
	wait := func(ctx context.Context, _ *neptune.Request) (*neptune.Response, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-release:
			return &neptune.Response{Body: []byte("done")}, nil
		}
	}
	slow := neptune.Service{Name: "slow", Methods: []neptune.Method{{Name: "wait", Mode: neptune.Read, Handler: wait}}}
	busy := neptune.Service{Name: "busy", Workers: 1, QueueLimit: 1, Methods: []neptune.Method{{Name: "wait", Mode: neptune.Read,
		Handler: func(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
			running <- struct{}{}
			return wait(ctx, r)
		}}}}
	nd := startNode(t, echo.Service(), websvc, slow, busy)

	g, _ := start(t, `
capacity_grps: 10000
routes:
  - {path_prefix: /echo, service: echo, method: echo, partition: {segment: 2}}
  - {path_prefix: /nosvc, service: nosuch, method: echo}
  - {path_prefix: /nomethod, service: echo, method: shout}
  - {path_prefix: /slow, service: slow, method: wait, timeout: 200ms}
  - {path_prefix: /busy, service: busy, method: wait, timeout: 10s}
  - {host: shop.example, service: web, method: http, passthrough: true, partition: {hash: true, query: user, count: 2}}
`, nd.Client(), nil)

	if w := do(g, "POST", "/echo/1", nil, "hello"); w.Code != 200 || w.Body.String() != "hello" {
		t.Errorf("echo: %d %q", w.Code, w.Body)
	}
	for _, tc := range []struct {
		target string
		code   int
	}{
		{"/echo/7", 404}, // a partition nobody hosts
		{"/echo/x", 400},
		{"/nosvc", 404},
		{"/nomethod", 404},
		{"/slow", 504},
	} {
		if w := do(g, "POST", tc.target, nil, ""); w.Code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.target, w.Code, w.Body, tc.code)
		}
	}

	// Passthrough: the program sees the request as the client sent it.
	r := httptest.NewRequest("PUT", "/items/a%2Fb?user=alice", strings.NewReader("data"))
	r.Host = "shop.example"
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != 200 || w.Body.String() != "PUT /items/a/b host=shop.example body=data" ||
		w.Header().Get("X-Seen-Path") != "/items/a%2Fb?user=alice" || w.Header().Get("X-Seen-Partition") == "" {
		t.Errorf("passthrough: %d %v %q", w.Code, w.Header(), w.Body)
	}
	r = httptest.NewRequest("GET", "/teapot?user=bob", nil)
	r.Host = "shop.example"
	w = httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != http.StatusTeapot {
		t.Errorf("the program's own status: %d, want 418", w.Code)
	}

	// Overload: one running and one queued on the node; a third is
	// refused there. Which of the last two is refused is up to the race.
	codes := make(chan int, 3)
	go func() { codes <- do(g, "POST", "/busy", nil, "").Code }()
	<-running
	var retry [2]string
	for i := range 2 {
		go func() {
			w := do(g, "POST", "/busy", nil, "")
			retry[i] = w.Header().Get("Retry-After")
			codes <- w.Code
		}()
	}
	if c := <-codes; c != 503 {
		t.Errorf("node queue full: %d, want 503", c)
	}
	close(release)
	for range 2 {
		if c := <-codes; c != 200 {
			t.Errorf("busy: %d, want 200 once released", c)
		}
	}
	if retry[0]+retry[1] != "1" {
		t.Errorf("Retry-After of the 503 and the 200: %q", retry)
	}
}

// TestClassFromSubscriber: a subscriber's class, not the route's, is the
// class the node's handler sees (dissertation §4.2.2); a subscriber with no
// class keeps the route's.
func TestClassFromSubscriber(t *testing.T) {
	whoami := neptune.Service{Name: "whoami", Methods: []neptune.Method{{Name: "class", Mode: neptune.Read,
		Handler: func(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
			return &neptune.Response{Body: []byte(r.Class)}, nil
		}}}}
	nd := startNode(t, whoami)
	g, _ := start(t, fmt.Sprintf(`
capacity_grps: 10000
subscribers:
  - {name: partner, reservation: 10, api_keys: [%s], class: gold}
  - {name: trial, reservation: 10, api_keys: [%s]}
routes:
  - {path_prefix: /class, service: whoami, method: class, class: bronze}
`, gage.HashKey("partner-key"), gage.HashKey("trial-key")), nd.Client(), nil)
	for _, tc := range []struct{ key, want string }{{"partner-key", "gold"}, {"trial-key", "bronze"}, {"", "bronze"}} {
		var h http.Header
		if tc.key != "" {
			h = key(tc.key)
		}
		if w := do(g, "POST", "/class", h, ""); w.Code != 200 || w.Body.String() != tc.want {
			t.Errorf("key %q: %d %q, want class %q", tc.key, w.Code, w.Body, tc.want)
		}
	}
}

// TestAffinityRouteKeepsAKeyOnOneReplica: a route's affinity key reaches
// the affinity policy its service gets (Config.Balancing, the client's
// ServiceBalance, over a client-wide random), so every request with one
// key is served by the same one of two replicas, and different keys use
// both.
func TestAffinityRouteKeepsAKeyOnOneReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var join []string
	for _, id := range []string{"r0", "r1"} {
		who := neptune.Service{Name: "whoami", Methods: []neptune.Method{{Name: "id", Mode: neptune.Read,
			Handler: func(context.Context, *neptune.Request) (*neptune.Response, error) {
				return &neptune.Response{Body: []byte(id)}, nil
			}}}}
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join, AnnounceInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := nd.Register(who, 0); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		join = []string{nd.GossipAddr()}
	}
	const routes = `
capacity_grps: 10000
routes:
  - {path_prefix: /who, service: whoami, method: id, affinity: {query: key}}
`
	cfg, err := ParseConfig([]byte(routes))
	if err != nil {
		t.Fatal(err)
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: join,
		Balance: neptune.Balancing{Policy: "random"}, ServiceBalance: cfg.Balancing()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for len(c.Members(ctx, 50*time.Millisecond)) < 2 {
		if ctx.Err() != nil {
			t.Fatal("the client never saw both replicas")
		}
		time.Sleep(20 * time.Millisecond)
	}
	g, _ := start(t, routes, c, nil)
	seen := map[string]bool{}
	for k := range 12 {
		first := ""
		for range 4 {
			w := do(g, "GET", fmt.Sprintf("/who?key=k%d", k), nil, "")
			if w.Code != http.StatusOK {
				t.Fatalf("key k%d: %d %s", k, w.Code, w.Body)
			}
			if first == "" {
				first = w.Body.String()
			}
			if got := w.Body.String(); got != first {
				t.Fatalf("key k%d served by %s and by %s", k, first, got)
			}
		}
		seen[first] = true
	}
	if len(seen) != 2 {
		t.Fatalf("12 keys all served by %v; the key is not what chooses", seen)
	}
	if w := do(g, "GET", "/who?key=a&key=b", nil, ""); w.Code != http.StatusBadRequest {
		t.Fatalf("a key given twice: %d, want 400", w.Code)
	}
}
