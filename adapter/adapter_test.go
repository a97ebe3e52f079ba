package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
)

func callMethod(t *testing.T, svc neptune.Service, method string, ctx context.Context, part int, lsn uint64, body string) ([]byte, error) {
	t.Helper()
	for _, m := range svc.Methods {
		if m.Name == method {
			resp, err := m.Handler(ctx, &neptune.Request{Service: svc.Name, Partition: part, Method: method, Mode: m.Mode, LSN: lsn, Body: []byte(body)})
			if err != nil {
				return nil, err
			}
			return resp.Body, nil
		}
	}
	t.Fatalf("no method %s", method)
	return nil, nil
}

func TestHTTPConfigValidate(t *testing.T) {
	ok := adapter.HTTPConfig{BaseURL: "http://127.0.0.1:1", Methods: []adapter.MethodConfig{{Name: "get", Mode: "read", Route: "/get"}}}
	for _, tc := range []struct {
		name string
		edit func(c *adapter.HTTPConfig)
		want string
	}{
		{"valid", func(*adapter.HTTPConfig) {}, ""},
		{"no base_url", func(c *adapter.HTTPConfig) { c.BaseURL = "" }, "http.base_url is required"},
		{"bad base_url", func(c *adapter.HTTPConfig) { c.BaseURL = "127.0.0.1:80" }, "http.base_url"},
		{"check_route", func(c *adapter.HTTPConfig) { c.CheckRoute = "check" }, "http.check_route"},
		{"timeout", func(c *adapter.HTTPConfig) { c.Timeout = -1 }, "http.timeout"},
		{"max_response", func(c *adapter.HTTPConfig) { c.MaxResponse = -1 }, "http.max_response"},
		{"max_request", func(c *adapter.HTTPConfig) { c.MaxRequest = -1 }, "http.max_request"},
		{"no methods", func(c *adapter.HTTPConfig) { c.Methods = nil }, "http.methods is empty"},
		{"no name", func(c *adapter.HTTPConfig) { c.Methods[0].Name = "" }, "http.methods[0].name"},
		{"twice", func(c *adapter.HTTPConfig) { c.Methods = append(c.Methods, c.Methods[0]) }, "http.methods[1].name"},
		{"mode", func(c *adapter.HTTPConfig) { c.Methods[0].Mode = "readwrite" }, "http.methods[0].mode"},
		{"route", func(c *adapter.HTTPConfig) { c.Methods[0].Route = "get" }, "http.methods[0].route"},
		{"verb", func(c *adapter.HTTPConfig) { c.Methods[0].Verb = "FETCH" }, "http.methods[0].verb"},
		{"args", func(c *adapter.HTTPConfig) { c.Methods[0].Args = []string{"x"} }, "http.methods[0].args"},
		{"stream passthrough", func(c *adapter.HTTPConfig) {
			c.Methods[0] = adapter.MethodConfig{Name: "s", Mode: "read", Stream: true, Passthrough: true}
		}, "set passthrough or stream, not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.Methods = append([]adapter.MethodConfig(nil), ok.Methods...)
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
			if _, err := adapter.NewHTTP("s", c); err == nil {
				t.Fatal("NewHTTP accepted an invalid config")
			}
		})
	}
}

func TestExecConfigValidate(t *testing.T) {
	ok := adapter.ExecConfig{Command: "cat", DataDir: "/tmp/x", Methods: []adapter.MethodConfig{{Name: "cat", Mode: "read"}}}
	for _, tc := range []struct {
		name string
		edit func(c *adapter.ExecConfig)
		want string
	}{
		{"valid", func(*adapter.ExecConfig) {}, ""},
		{"no command", func(c *adapter.ExecConfig) { c.Command = "" }, "exec.command is required"},
		{"no data_dir", func(c *adapter.ExecConfig) { c.DataDir = "" }, "exec.data_dir is required"},
		{"timeout", func(c *adapter.ExecConfig) { c.Timeout = -time.Second }, "exec.timeout"},
		{"max_response", func(c *adapter.ExecConfig) { c.MaxResponse = -1 }, "exec.max_response"},
		{"max_request", func(c *adapter.ExecConfig) { c.MaxRequest = -1 }, "exec.max_request"},
		{"exit code", func(c *adapter.ExecConfig) { c.OKExitCodes = []int{0, 300} }, "exec.ok_exit_codes[1]"},
		{"no methods", func(c *adapter.ExecConfig) { c.Methods = nil }, "exec.methods is empty"},
		{"mode", func(c *adapter.ExecConfig) { c.Methods[0].Mode = "" }, "exec.methods[0].mode"},
		{"route", func(c *adapter.ExecConfig) { c.Methods[0].Route = "/x" }, "exec.methods[0]: route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.Methods = append([]adapter.MethodConfig(nil), ok.Methods...)
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

// program is an HTTP service that knows nothing of Neptune beyond reading
// two headers: an append-only log per partition that records LSNs.
type program struct {
	mu   sync.Mutex
	logs map[string][]string
	lsn  map[string]uint64
}

func (p *program) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /append", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if len(b) == 0 {
			http.Error(w, "empty line", http.StatusBadRequest)
			return
		}
		part := r.Header.Get("Neptune-Partition")
		lsn, _ := strconv.ParseUint(r.Header.Get("Neptune-LSN"), 10, 64)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.logs[part] = append(p.logs[part], string(b))
		p.lsn[part] = max(p.lsn[part], lsn)
		fmt.Fprintf(w, "%d", len(p.logs[part]))
	})
	mux.HandleFunc("GET /read", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		fmt.Fprintf(w, "%s %s", r.Header.Get("Neptune-Method"), strings.Join(p.logs[r.Header.Get("Neptune-Partition")], ","))
	})
	mux.HandleFunc("GET /check", func(w http.ResponseWriter, r *http.Request) {
		lsn, _ := strconv.ParseUint(r.Header.Get("Neptune-LSN"), 10, 64)
		p.mu.Lock()
		defer p.mu.Unlock()
		fmt.Fprint(w, lsn <= p.lsn[r.Header.Get("Neptune-Partition")])
	})
	mux.HandleFunc("POST /busy", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "try later", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("POST /crash", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nil pointer", http.StatusInternalServerError)
	})
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the server notices the client hanging up only once the body is read
		<-r.Context().Done()
	})
	return mux
}

func TestHTTP(t *testing.T) {
	p := &program{logs: map[string][]string{}, lsn: map[string]uint64{}}
	srv := httptest.NewServer(p.handler())
	defer srv.Close()
	methods := []adapter.MethodConfig{
		{Name: "append", Mode: "write", Route: "/append"},
		{Name: "read", Mode: "read", Route: "/read", Verb: "get"},
		{Name: "busy", Mode: "write", Route: "/busy"},
		{Name: "crash", Mode: "write", Route: "/crash"},
		{Name: "slow", Mode: "read", Route: "/slow"},
		{Name: "missing", Mode: "read", Route: "/nope"},
	}
	svc, err := adapter.NewHTTP("log", adapter.HTTPConfig{BaseURL: srv.URL + "/", CheckRoute: "/check", Methods: methods})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, line := range []string{"a", "b"} {
		out, err := callMethod(t, svc, "append", ctx, 3, uint64(i+1), line)
		if err != nil || string(out) != strconv.Itoa(i+1) {
			t.Fatalf("append %s = %q, %v", line, out, err)
		}
	}
	if out, err := callMethod(t, svc, "read", ctx, 3, 0, ""); err != nil || string(out) != "read a,b" {
		t.Fatalf("read = %q, %v", out, err)
	}
	for _, tc := range []struct {
		part int
		lsn  uint64
		want bool
	}{{3, 2, true}, {3, 3, false}, {4, 1, false}} {
		if ok, err := svc.Check(ctx, tc.part, tc.lsn); ok != tc.want || err != nil {
			t.Fatalf("Check(%d, %d) = %v, %v", tc.part, tc.lsn, ok, err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	for _, tc := range []struct {
		method string
		ctx    context.Context
		body   string
		want   error
		text   string
	}{
		{"append", ctx, "", adapter.ErrBadRequest, "status 400: empty line"},
		{"busy", ctx, "x", neptune.ErrOverloaded, "status 503: try later"},
		{"crash", ctx, "x", adapter.ErrProgram, "status 500: nil pointer"},
		{"missing", ctx, "x", adapter.ErrBadRequest, "/nope: status 404"},
		{"slow", short, "x", neptune.ErrDeadline, "/slow"},
	} {
		t.Run(tc.method, func(t *testing.T) {
			_, err := callMethod(t, svc, tc.method, tc.ctx, 3, 0, tc.body)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.text)
			}
		})
	}
	if !neptune.Retryable(fmt.Errorf("x: %w", neptune.ErrOverloaded)) {
		t.Fatal("503 should be retryable")
	}
	srv.Close()
	if _, err := callMethod(t, svc, "read", ctx, 3, 0, ""); !errors.Is(err, adapter.ErrUnreachable) {
		t.Fatalf("server down: err = %v, want ErrUnreachable", err)
	}
}

func TestHTTPCheckAnswerMustBeBoolean(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "yes") }))
	defer srv.Close()
	svc, err := adapter.NewHTTP("s", adapter.HTTPConfig{BaseURL: srv.URL, CheckRoute: "/c", Methods: []adapter.MethodConfig{{Name: "m", Mode: "read", Route: "/"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Check(context.Background(), 0, 1); !errors.Is(err, adapter.ErrProgram) || !strings.Contains(err.Error(), `"yes"`) {
		t.Fatalf("err = %v", err)
	}
}

// writeScript makes an executable shell script in dir.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecGrep(t *testing.T) {
	data := t.TempDir()
	for part, files := range map[int]map[string]string{
		0: {"a.txt": "apple\nbanana\n", "b.txt": "cherry\napricot\n"},
		1: {"c.txt": "apple pie\n"},
	} {
		dir := filepath.Join(data, strconv.Itoa(part))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	svc, err := adapter.NewExec("grep", adapter.ExecConfig{
		Command: "grep", Args: []string{"-r", "-h", "-F", "-f", "/dev/stdin", "."},
		DataDir: data, OKExitCodes: []int{0, 1},
		Methods: []adapter.MethodConfig{
			{Name: "search", Mode: "read"},
			{Name: "count", Mode: "read", Args: []string{"-r", "-c", "-F", "-f", "/dev/stdin", "a.txt"}},
			{Name: "broken", Mode: "read", Args: []string{"--no-such-flag"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sorted := func(b []byte) string {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		slicesSort(lines)
		return strings.Join(lines, "|")
	}
	for _, tc := range []struct {
		method  string
		part    int
		pattern string
		want    string
	}{
		{"search", 0, "ap", "apple|apricot"},
		{"search", 1, "ap", "apple pie"},
		{"search", 0, "zebra", ""},
		{"search", 7, "ap", ""}, // a new partition starts with an empty directory
		{"count", 0, "an", "1"},
	} {
		out, err := callMethod(t, svc, tc.method, ctx, tc.part, 0, tc.pattern+"\n")
		if err != nil || sorted(out) != tc.want {
			t.Fatalf("%s(%d, %q) = %q, %v; want %q", tc.method, tc.part, tc.pattern, out, err, tc.want)
		}
	}
	_, err = callMethod(t, svc, "broken", ctx, 0, 0, "x")
	if !errors.Is(err, adapter.ErrProgram) || !strings.Contains(err.Error(), "exit status 2") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("bad flag: err = %v, want ErrProgram with exit status 2 and grep's stderr", err)
	}
}

func slicesSort(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func TestExecEnvironmentAndErrors(t *testing.T) {
	bin := t.TempDir()
	env := writeScript(t, bin, "env.sh", `printf '%s %s %s %s %s %s ' "$NEPTUNE_PARTITION" "$NEPTUNE_LSN" "$NEPTUNE_METHOD" "$(basename "$PWD")" "$NEPTUNE_REQUEST_ID" "$TRACEPARENT"; cat`)
	fail := writeScript(t, bin, "fail.sh", `echo "disk on fire" >&2; exit 3`)
	data := t.TempDir()
	svc, err := adapter.NewExec("env", adapter.ExecConfig{Command: env, DataDir: data, Methods: []adapter.MethodConfig{{Name: "put", Mode: "write"}}})
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(neptune.WithRequestID(context.Background(), "req-9"),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	out, err := callMethod(t, svc, "put", ctx, 5, 42, "body")
	if err != nil || string(out) != "5 42 put 5 req-9 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 body" {
		t.Fatalf("env = %q, %v", out, err)
	}
	svc, err = adapter.NewExec("fail", adapter.ExecConfig{Command: fail, DataDir: data, Methods: []adapter.MethodConfig{{Name: "m", Mode: "read"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callMethod(t, svc, "m", context.Background(), 0, 0, ""); !errors.Is(err, adapter.ErrProgram) || !strings.Contains(err.Error(), "exit status 3: disk on fire") {
		t.Fatalf("err = %v", err)
	}
	svc, err = adapter.NewExec("none", adapter.ExecConfig{Command: filepath.Join(bin, "missing"), DataDir: data, Methods: []adapter.MethodConfig{{Name: "m", Mode: "read"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callMethod(t, svc, "m", context.Background(), 0, 0, ""); !errors.Is(err, adapter.ErrUnreachable) {
		t.Fatalf("missing program: err = %v", err)
	}
	big := writeScript(t, bin, "big.sh", `head -c 5000 /dev/zero`)
	svc, err = adapter.NewExec("big", adapter.ExecConfig{Command: big, DataDir: data, MaxResponse: 1000, Methods: []adapter.MethodConfig{{Name: "m", Mode: "read"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callMethod(t, svc, "m", context.Background(), 0, 0, ""); !errors.Is(err, neptune.ErrTooLarge) || !strings.Contains(err.Error(), "max_response") {
		t.Fatalf("big output: err = %v", err)
	}
}

// alive reports whether pid is a running process (a zombie awaiting its
// reaper counts as dead).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: trust kill(0)
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(after, "Z")
}

// TestExecHungProgramKilledAtDeadline runs a script that starts a
// background child and hangs; at the timeout both must be dead.
func TestExecHungProgramKilledAtDeadline(t *testing.T) {
	bin := t.TempDir()
	pidFile := filepath.Join(bin, "child.pid")
	hang := writeScript(t, bin, "hang.sh", `sleep 300 & echo $! > `+pidFile+`; echo "started" >&2; wait`)
	svc, err := adapter.NewExec("hang", adapter.ExecConfig{Command: hang, DataDir: t.TempDir(), Timeout: 300 * time.Millisecond, Methods: []adapter.MethodConfig{{Name: "m", Mode: "read"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = callMethod(t, svc, "m", context.Background(), 0, 0, "")
	if !errors.Is(err, neptune.ErrDeadline) || !strings.Contains(err.Error(), "killed after 300ms") {
		t.Fatalf("err = %v, want ErrDeadline naming the timeout", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// The child was in the killed process group; once reaped by init it
	// no longer exists. Allow a moment for the kernel to deliver SIGKILL.
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d of the hung program survived the deadline", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The caller's own earlier deadline wins over the configured timeout.
	svc, _ = adapter.NewExec("hang", adapter.ExecConfig{Command: hang, DataDir: t.TempDir(), Timeout: time.Minute, Methods: []adapter.MethodConfig{{Name: "m", Mode: "read"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := callMethod(t, svc, "m", ctx, 0, 0, ""); !errors.Is(err, neptune.ErrDeadline) {
		t.Fatalf("caller deadline: err = %v", err)
	}
}

// The program's own CPU time (and its children's) comes back in
// Response.Used, for the node to charge the request: the handler's
// thread only waits for it.
func TestExecReportsChildUsage(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	svc, err := adapter.NewExec("busy", adapter.ExecConfig{
		Command: "sh", Args: []string{"-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done"},
		DataDir: t.TempDir(), Methods: []adapter.MethodConfig{{Name: "m", Mode: "read"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := svc.Methods[0].Handler(context.Background(), &neptune.Request{Method: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Used.CPU < 10*time.Millisecond {
		t.Fatalf("Used.CPU = %v after a 200,000-step shell loop, want the child's CPU time", resp.Used.CPU)
	}
}
