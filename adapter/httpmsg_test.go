package adapter_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
)

func TestFramingRoundTrip(t *testing.T) {
	h := http.Header{}
	h.Add("Accept", "text/html")
	h.Add("X-Multi", "one")
	h.Add("X-Multi", "two")
	h.Set("Connection", "keep-alive, X-Private")
	h.Set("X-Private", "per connection")
	h.Set("Keep-Alive", "timeout=5")
	msg, err := adapter.MarshalRequest("POST", "/a%2Fb/c?q=1&q=2", "shop.example:8080", h, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	req, body, err := adapter.UnmarshalRequest(msg)
	if err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	if req.Method != "POST" || req.RequestURI != "/a%2Fb/c?q=1&q=2" || req.Host != "shop.example:8080" || string(body) != "payload" {
		t.Errorf("got %s %s host %s body %q", req.Method, req.RequestURI, req.Host, body)
	}
	if got := req.Header.Values("X-Multi"); len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Errorf("repeated header: %q", got)
	}
	for _, hop := range []string{"Connection", "X-Private", "Keep-Alive"} {
		if req.Header.Get(hop) != "" {
			t.Errorf("hop-by-hop header %s was framed", hop)
		}
	}

	rh := http.Header{}
	rh.Set("Content-Type", "text/plain")
	rh.Set("Transfer-Encoding", "chunked") // hop-by-hop: must not frame
	rh.Set("Content-Length", "999")        // replaced by the real length
	status, gotH, gotBody, err := adapter.UnmarshalResponse(adapter.MarshalResponse(http.StatusTeapot, rh, []byte("short")), "GET")
	if err != nil || status != http.StatusTeapot || string(gotBody) != "short" || gotH.Get("Content-Type") != "text/plain" {
		t.Errorf("response: %d %v %q %v", status, gotH, gotBody, err)
	}

	// The answer to HEAD keeps the length GET would send.
	hh := http.Header{}
	hh.Set("Content-Length", "1234")
	status, gotH, gotBody, err = adapter.UnmarshalResponse(adapter.MarshalResponse(200, hh, nil), "HEAD")
	if err != nil || status != 200 || len(gotBody) != 0 || gotH.Get("Content-Length") != "1234" {
		t.Errorf("HEAD response: %d %v %q %v", status, gotH, gotBody, err)
	}
}

func TestFramingRejects(t *testing.T) {
	for name, tc := range map[string]struct{ method, target, host string }{
		"method":   {"GE T", "/", "h"},
		"absolute": {"GET", "http://evil/", "h"},
		"crlf":     {"GET", "/\r\nX: y", "h"},
		"host":     {"GET", "/", "h\r\nX: y"},
	} {
		if _, err := adapter.MarshalRequest(tc.method, tc.target, tc.host, nil, nil); !errors.Is(err, adapter.ErrFraming) {
			t.Errorf("%s: err = %v, want ErrFraming", name, err)
		}
	}
	for name, msg := range map[string]string{
		"garbage":  "hello",
		"absolute": "GET http://evil/x HTTP/1.1\r\nHost: h\r\n\r\n",
		"trailing": "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nxGET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"short":    "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc",
	} {
		if _, _, err := adapter.UnmarshalRequest([]byte(msg)); !errors.Is(err, adapter.ErrFraming) {
			t.Errorf("%s: err = %v, want ErrFraming", name, err)
		}
	}
	// A header that would break the framing is left out, not sent.
	h := http.Header{"X-Evil": {"a\r\nInjected: 1"}, "Bad Name": {"x"}, "X-Ok": {"fine"}}
	msg, err := adapter.MarshalRequest("GET", "/", "h", h, nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _, err := adapter.UnmarshalRequest(msg)
	if err != nil || req.Header.Get("Injected") != "" || req.Header.Get("X-Evil") != "" || req.Header.Get("X-Ok") != "fine" {
		t.Errorf("unsafe headers: %v %v\n%s", req.Header, err, msg)
	}
}

// A passthrough method hands the program the client's request as it came
// and the client the program's answer as it went, whatever the status.
func TestHTTPPassthrough(t *testing.T) {
	var seen *http.Request
	var seenBody string
	prog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen, seenBody = r, string(b)
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/missing":
			http.Error(w, "no such page", http.StatusNotFound)
		default:
			w.Header().Set("X-Answer", "42")
			w.Header().Add("Set-Cookie", "a=1")
			w.Header().Add("Set-Cookie", "b=2")
			io.WriteString(w, "hello "+r.Host)
		}
	}))
	defer prog.Close()
	svc, err := adapter.NewHTTP("web", adapter.HTTPConfig{BaseURL: prog.URL, Methods: []adapter.MethodConfig{{Name: "http", Mode: "read", Passthrough: true}}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, target string, h http.Header, body string) (int, http.Header, string) {
		t.Helper()
		msg, err := adapter.MarshalRequest(method, target, "shop.example", h, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		out, err := callMethod(t, svc, "http", context.Background(), 3, 0, string(msg))
		if err != nil {
			t.Fatal(err)
		}
		status, rh, rb, err := adapter.UnmarshalResponse(out, method)
		if err != nil {
			t.Fatal(err)
		}
		return status, rh, string(rb)
	}
	h := http.Header{"X-Tenant": {"t1"}, "Cookie": {"s=1"}}
	status, rh, body := call("PUT", "/items/a%2Fb?x=1&x=2", h, "data")
	if status != 200 || body != "hello shop.example" || rh.Get("X-Answer") != "42" || len(rh.Values("Set-Cookie")) != 2 {
		t.Errorf("answer: %d %v %q", status, rh, body)
	}
	if seen.Method != "PUT" || seen.RequestURI != "/items/a%2Fb?x=1&x=2" || seenBody != "data" ||
		seen.Header.Get("X-Tenant") != "t1" || seen.Header.Get("Cookie") != "s=1" || seen.Header.Get("User-Agent") != "" {
		t.Errorf("program saw %s %s body %q headers %v", seen.Method, seen.RequestURI, seenBody, seen.Header)
	}
	if seen.Header.Get(adapter.HeaderPartition) != "3" || seen.Header.Get(adapter.HeaderMethod) != "http" {
		t.Errorf("Neptune headers: %v", seen.Header)
	}
	if status, rh, _ := call("GET", "/moved", nil, ""); status != http.StatusFound || rh.Get("Location") != "/elsewhere" {
		t.Errorf("redirect followed or lost: %d %v", status, rh)
	}
	if status, _, body := call("GET", "/missing", nil, ""); status != http.StatusNotFound || !strings.Contains(body, "no such page") {
		t.Errorf("program's 404: %d %q", status, body)
	}
	if _, err := callMethod(t, svc, "http", context.Background(), 0, 0, "not a request"); !errors.Is(err, adapter.ErrBadRequest) {
		t.Errorf("garbage: %v, want ErrBadRequest", err)
	}
	for _, bad := range []adapter.MethodConfig{
		{Name: "http", Mode: "read", Passthrough: true, Route: "/x"},
		{Name: "http", Mode: "read", Passthrough: true, Verb: "GET"},
	} {
		if _, err := adapter.NewHTTP("web", adapter.HTTPConfig{BaseURL: prog.URL, Methods: []adapter.MethodConfig{bad}}); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
	if _, err := adapter.NewExec("x", adapter.ExecConfig{Command: "/bin/true", Methods: []adapter.MethodConfig{{Name: "m", Mode: "read", Passthrough: true}}}); err == nil {
		t.Error("exec accepted a passthrough method")
	}
	_ = neptune.Read
}

// Parsing a framed request never panics, and what parses frames again to
// an equivalent request.
func FuzzUnmarshalRequest(f *testing.F) {
	f.Add([]byte("GET /a?b=c HTTP/1.1\r\nHost: h\r\nX: 1\r\nContent-Length: 2\r\n\r\nhi"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"))
	f.Add([]byte("GET http://x/ HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		req, body, err := adapter.UnmarshalRequest(msg)
		if err != nil {
			return
		}
		again, err := adapter.MarshalRequest(req.Method, req.RequestURI, req.Host, req.Header, body)
		if err != nil {
			return // e.g. a host with a space the parser let through
		}
		req2, body2, err := adapter.UnmarshalRequest(again)
		if err != nil {
			t.Fatalf("re-framed request does not parse: %v\n%q", err, again)
		}
		if req2.Method != req.Method || req2.RequestURI != req.RequestURI || string(body2) != string(body) {
			t.Fatalf("round trip changed the request: %s %s %q -> %s %s %q", req.Method, req.RequestURI, body, req2.Method, req2.RequestURI, body2)
		}
	})
}

// TestHTTPProgramJoinsTheTrace: an unmodified HTTP program is told which
// call its request belongs to, passthrough or not: the handler's W3C
// trace context (traceparent) and the call's request id (X-Request-Id).
func TestHTTPProgramJoinsTheTrace(t *testing.T) {
	seen := make(chan http.Header, 2)
	prog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Clone() }))
	defer prog.Close()
	svc, err := adapter.NewHTTP("web", adapter.HTTPConfig{BaseURL: prog.URL, Methods: []adapter.MethodConfig{
		{Name: "http", Mode: "read", Passthrough: true}, {Name: "get", Mode: "read", Route: "/get"}}})
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(neptune.WithRequestID(context.Background(), "req-1"),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	// The caller's own traceparent is replaced by the handler's.
	msg, err := adapter.MarshalRequest("GET", "/", "h", http.Header{"Traceparent": {"00-11111111111111111111111111111111-2222222222222222-01"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ method, body string }{{"http", string(msg)}, {"get", ""}} {
		if _, err := callMethod(t, svc, m.method, ctx, 0, 0, m.body); err != nil {
			t.Fatal(err)
		}
		h := <-seen
		if got, want := h.Get("Traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
			t.Errorf("%s: traceparent %q, want %q", m.method, got, want)
		}
		if got := h.Get("X-Request-Id"); got != "req-1" {
			t.Errorf("%s: X-Request-Id %q, want req-1", m.method, got)
		}
	}
}
