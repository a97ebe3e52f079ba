package work

import (
	"context"
	"errors"
	"os"
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
		{"file", EncodeBytes(16<<20 + 1)},
		{"file", nil},
		{"slowdown", []byte("0")},
		{"slowdown", []byte("fast")},
	} {
		if _, err := call(t, svc, tc.method, tc.body); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s(%q): err = %v, want ErrBadRequest", tc.method, tc.body, err)
		}
	}
}

func TestFileAnswersTheBytesAsked(t *testing.T) {
	svc := Service()
	for _, n := range []int{0, 1, 100_000, 16 << 20} {
		resp, err := call(t, svc, "file", EncodeBytes(n))
		if err != nil || len(resp.Body) != n {
			t.Fatalf("file(%d): %d bytes, %v", n, len(resp.Body), err)
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

// A read answers the pid, of whichever footprint it is asked (the file
// of another replaces it), and leaves no file behind; a footprint over
// the bound or under a block is refused.
func TestReadAndRejectsBadFootprints(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	svc := Service()
	for _, n := range []int{ReadBlock, 1<<20 + 5, ReadBlock} {
		resp, err := call(t, svc, "read", EncodeRead(n, 100*time.Microsecond))
		if err != nil {
			t.Fatalf("read of a %d-byte footprint: %v", n, err)
		}
		if pid, err := PID(resp.Body); err != nil || pid != os.Getpid() {
			t.Fatalf("PID(%q) = %d, %v; want %d", resp.Body, pid, err, os.Getpid())
		}
	}
	if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
		t.Errorf("temp dir holds %d entries (%v), want none", len(es), err)
	}
	for _, body := range [][]byte{
		EncodeRead(maxRead+1, 0),
		EncodeRead(ReadBlock-1, 0),
		EncodeBytes(1 << 20),
		append(EncodeRead(1<<20, 0), 0),
	} {
		if _, err := call(t, svc, "read", body); !errors.Is(err, ErrBadRequest) {
			t.Errorf("read(%x): %v, want ErrBadRequest", body, err)
		}
	}
}
