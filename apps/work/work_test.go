package work

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
)

func call(t *testing.T, svc neptune.Service, method string, body []byte) (*neptune.Response, error) {
	t.Helper()
	for _, m := range svc.Methods {
		if m.Name == method {
			return m.Handler(context.Background(), &neptune.Request{Service: svc.Name, Method: method, Mode: m.Mode, Body: body})
		}
	}
	t.Fatalf("no method %q", method)
	return nil, nil
}

func TestWorkNamesPIDAndRejectsBadBodies(t *testing.T) {
	svc := Service()
	if err := svc.Validate(); err != nil {
		t.Fatal(err)
	}
	resp, err := call(t, svc, "work", Encode(time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := PID(resp.Body); err != nil || pid != os.Getpid() {
		t.Fatalf("PID(%q) = %d, %v; want %d", resp.Body, pid, err, os.Getpid())
	}
	for _, tc := range []struct {
		method string
		body   []byte
	}{
		{"work", nil},
		{"work", append(Encode(time.Millisecond), 0)},
		{"slowdown", []byte("0")},
		{"slowdown", []byte("fast")},
	} {
		if _, err := call(t, svc, tc.method, tc.body); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s(%q): err = %v, want ErrBadRequest", tc.method, tc.body, err)
		}
	}
}

func TestSlowdownReturnsPreviousFactor(t *testing.T) {
	svc := Service()
	for _, tc := range []struct{ set, prev string }{{"10", "1"}, {"2.5", "10"}, {"1", "2.5"}} {
		resp, err := call(t, svc, "slowdown", []byte(tc.set))
		if err != nil || string(resp.Body) != tc.prev {
			t.Fatalf("slowdown(%s) = %q, %v; want %q", tc.set, resp.Body, err, tc.prev)
		}
	}
}

func TestWorkStopsWhenCallerGivesUp(t *testing.T) {
	svc := Service()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := svc.Methods[0].Handler(ctx, &neptune.Request{Body: Encode(time.Hour)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestSpinAndFsync(t *testing.T) {
	svc := Service()
	start := time.Now()
	if _, err := call(t, svc, "spin", Encode(5*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 5*time.Millisecond {
		t.Errorf("spin of 5ms returned after %v", d)
	}
	if _, err := call(t, svc, "fsync", EncodeBytes(3<<20+5)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		body   []byte
	}{{"spin", nil}, {"fsync", []byte{0xff}}, {"fsync", EncodeBytes(maxFsync + 1)}} {
		if _, err := call(t, svc, tc.method, tc.body); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s(%x): %v, want ErrBadRequest", tc.method, tc.body, err)
		}
	}
}

// writeBytes is the calling thread's write_bytes (/proc/thread-self/io),
// false where the kernel keeps no per-task I/O accounting.
func writeBytes(t *testing.T) (int64, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/io")
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("write_bytes: ")); ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// Every fsync call writes its bytes to the device again, though its
// scratch file is reused, and leaves no file behind.
func TestFsyncWritesEveryCallAndLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	svc := Service()
	const n = 100_000
	for i := range 3 {
		w0, ok := writeBytes(t)
		if _, err := call(t, svc, "fsync", EncodeBytes(n)); err != nil {
			t.Fatal(err)
		}
		w1, _ := writeBytes(t)
		if !ok || w1 == w0 && i == 0 {
			t.Skip("no per-task write_bytes here, or the temp dir's filesystem counts none (tmpfs?)")
		}
		if w1-w0 < n {
			t.Errorf("call %d: %d bytes written to the device, want at least %d", i, w1-w0, n)
		}
	}
	if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
		t.Errorf("temp dir holds %d entries (%v), want none", len(es), err)
	}
}
