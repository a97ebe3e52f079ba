package cli

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthExitsZeroOnlyWhenReady(t *testing.T) {
	ready := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/livez":
			fmt.Fprintln(w, "ok")
		case r.URL.Path == "/readyz" && ready:
			fmt.Fprintln(w, "ready")
		case r.URL.Path == "/readyz":
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: not joined: no other member seen yet")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	code, stdout, stderr := run(t, []string{"health", "--addr", addr})
	if code != ExitFailed || !strings.Contains(stderr, "503") || !strings.Contains(stderr, "not joined") {
		t.Fatalf("not ready: exit %d, %q, %q", code, stdout, stderr)
	}
	if code, stdout, stderr = run(t, []string{"health", "--addr", addr, "--live"}); code != ExitOK || stdout != "ok\n" {
		t.Fatalf("live: exit %d, %q, %q", code, stdout, stderr)
	}
	ready = true
	if code, stdout, stderr = run(t, []string{"health", "--addr", addr}); code != ExitOK || stdout != "ready\n" {
		t.Fatalf("ready: exit %d, %q, %q", code, stdout, stderr)
	}
	t.Setenv("NEPTUNE_ADDR", addr) // what a container sets instead of the flag
	if code, stdout, stderr = run(t, []string{"health"}); code != ExitOK {
		t.Fatalf("NEPTUNE_ADDR: exit %d, %q, %q", code, stdout, stderr)
	}
}

func TestHealthFailsWithoutAListenerAndOnBadFlags(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	if code, _, stderr := run(t, []string{"health", "--addr", closed}); code != ExitFailed || !strings.Contains(stderr, closed) {
		t.Fatalf("no listener: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, []string{"health", "--addr", "nohost"}); code != ExitUsage || !strings.Contains(stderr, "--addr") {
		t.Fatalf("bad --addr: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, []string{"health", "--timeout", "0s"}); code != ExitUsage || !strings.Contains(stderr, "--timeout") {
		t.Fatalf("bad --timeout: exit %d, %q", code, stderr)
	}
}
