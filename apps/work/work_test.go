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
