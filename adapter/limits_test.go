package adapter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
	"github.com/neptune-cluster/neptune/internal/nerr"
)

func TestDefaultMaxBodyIsTheNodeDefault(t *testing.T) {
	if adapter.DefaultMaxBody != nerr.DefaultMaxMessageBytes {
		t.Fatalf("adapter.DefaultMaxBody %d, node default %d", adapter.DefaultMaxBody, nerr.DefaultMaxMessageBytes)
	}
}

// Bodies over the limits fail with neptune.ErrTooLarge: a request before
// the program sees it; an answer by its Content-Length before it is read,
// or, without one, once the capped read passes the limit.
func TestHTTPBodyLimits(t *testing.T) {
	var calls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Get("chunked") != "" {
			w.(http.Flusher).Flush() // no Content-Length: the body streams
		} else {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		w.Write([]byte(strings.Repeat("x", n)))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	svc, err := adapter.NewHTTP("lim", adapter.HTTPConfig{BaseURL: srv.URL, MaxRequest: 100, MaxResponse: 1000, Methods: []adapter.MethodConfig{
		{Name: "small", Mode: "read", Route: "/echo?n=10"},
		{Name: "long", Mode: "read", Route: "/echo?n=5000"},
		{Name: "stream", Mode: "read", Route: "/echo?n=5000&chunked=1"},
		{Name: "raw", Mode: "read", Passthrough: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if out, err := callMethod(t, svc, "small", ctx, 0, 0, "hi"); err != nil || len(out) != 10 {
		t.Fatalf("small = %d bytes, %v", len(out), err)
	}
	before := calls.Load()
	if _, err := callMethod(t, svc, "small", ctx, 0, 0, strings.Repeat("b", 101)); !errors.Is(err, neptune.ErrTooLarge) || !strings.Contains(err.Error(), "max_request") {
		t.Fatalf("101-byte request: %v, want ErrTooLarge naming max_request", err)
	}
	if calls.Load() != before {
		t.Fatal("the oversized request reached the program")
	}
	for _, m := range []string{"long", "stream"} {
		if _, err := callMethod(t, svc, m, ctx, 0, 0, ""); !errors.Is(err, neptune.ErrTooLarge) || !strings.Contains(err.Error(), "max_response") {
			t.Fatalf("%s: %v, want ErrTooLarge naming max_response", m, err)
		}
	}
	if _, err := callMethod(t, svc, "long", ctx, 0, 0, ""); err == nil || !strings.Contains(err.Error(), "Content-Length") {
		t.Fatalf("long: %v, want the refusal by Content-Length", err)
	}
	msg, err := adapter.MarshalRequest("POST", "/echo?n=1", "x", http.Header{}, []byte(strings.Repeat("b", 200)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callMethod(t, svc, "raw", ctx, 0, 0, string(msg)); !errors.Is(err, neptune.ErrTooLarge) {
		t.Fatalf("passthrough with a 200-byte body: %v, want ErrTooLarge", err)
	}
	msg, _ = adapter.MarshalRequest("GET", "/echo?n=5000", "x", http.Header{}, nil)
	if _, err := callMethod(t, svc, "raw", ctx, 0, 0, string(msg)); !errors.Is(err, neptune.ErrTooLarge) {
		t.Fatalf("passthrough with a 5000-byte answer: %v, want ErrTooLarge", err)
	}
}

func TestExecStdinLimit(t *testing.T) {
	bin, data := t.TempDir(), t.TempDir()
	marker := bin + "/ran"
	cat := writeScript(t, bin, "cat.sh", "touch "+marker+"\ncat\n")
	svc, err := adapter.NewExec("cat", adapter.ExecConfig{Command: cat, DataDir: data, MaxRequest: 100, Methods: []adapter.MethodConfig{{Name: "m", Mode: "read"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := callMethod(t, svc, "m", context.Background(), 0, 0, "hello"); err != nil || string(out) != "hello" {
		t.Fatalf("small = %q, %v", out, err)
	}
	if err := removeIfExists(marker); err != nil {
		t.Fatal(err)
	}
	if _, err := callMethod(t, svc, "m", context.Background(), 0, 0, strings.Repeat("b", 101)); !errors.Is(err, neptune.ErrTooLarge) || !strings.Contains(err.Error(), "max_request") {
		t.Fatalf("101 bytes on stdin: %v, want ErrTooLarge naming max_request", err)
	}
	if fileExists(marker) {
		t.Fatal("the program ran for an oversized request")
	}
}

func removeIfExists(p string) error {
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
