package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/gage"
)

// timedWriter records when (on the clock) each write happened and how
// much it wrote.
type timedWriter struct {
	clk    clock.Clock
	header http.Header
	mu     sync.Mutex
	writes []timedWrite
	body   bytes.Buffer
}

type timedWrite struct {
	at time.Time
	n  int
}

func (w *timedWriter) Header() http.Header { return w.header }
func (w *timedWriter) WriteHeader(int)     {}
func (w *timedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, timedWrite{w.clk.Now(), len(b)})
	return w.body.Write(b)
}

func pacerFor(t *testing.T, y string, clk clock.Clock) *pacer {
	t.Helper()
	cfg, err := ParseConfig([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPacer(cfg.WithDefaults(), clk, func(string) float64 { return 1 })
	if err != nil || p == nil {
		t.Fatalf("pacer: %v, %v", p, err)
	}
	return p
}

// drive advances clk a millisecond at a time while a write is paced, each
// step once the write waits on the clock, until done is closed.
func drive(t *testing.T, clk *clock.Manual, done <-chan error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		select {
		case err := <-done:
			return err
		default:
		}
		wait, stop := context.WithTimeout(ctx, 10*time.Millisecond)
		err := clk.BlockUntilContext(wait, 1)
		stop()
		if ctx.Err() != nil {
			t.Fatal("paced write did not finish")
		}
		if err == nil {
			clk.Advance(time.Millisecond)
		}
	}
}

const paceConfig = `
capacity_grps: 1000
pace_responses: true
pace_max_delay: 10s
subscribers:
  - {name: a, reservation: 100, rules: [{host: a.example}]}
routes:
  - {service: s, method: m}
`

// A 50,000-byte response of a 100 GRPS subscriber (200 KB/s of network)
// leaves in 16 KiB chunks at 1.25 x 200 KB/s: the first at once, the last
// 49,152 bytes' worth (197 ms) later, the bytes intact. An unreserved
// subscriber's response leaves at once.
func TestPacedResponseLeavesAtThePace(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	p := pacerFor(t, paceConfig, clk)
	body := bytes.Repeat([]byte("0123456789"), 5000)
	w := &timedWriter{clk: clk, header: http.Header{}}
	done := make(chan error, 1)
	go func() {
		_, err := p.write(context.Background(), w, "a", body)
		done <- err
	}()
	if err := drive(t, clk, done); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.body.Bytes(), body) {
		t.Fatalf("body changed on the way: %d bytes, want %d", w.body.Len(), len(body))
	}
	if len(w.writes) != 4 || !w.writes[0].at.Equal(t0) {
		t.Fatalf("writes %+v, want 4 chunks, the first at once", w.writes)
	}
	want := time.Duration(float64(3*gage.DefaultShapeChunk) / (1.25 * 200_000) * float64(time.Second))
	if got := w.writes[3].at.Sub(t0); got < want || got > want+5*time.Millisecond {
		t.Fatalf("last chunk at %v, want %v (the pace), give or take the test's clock steps", got, want)
	}

	w = &timedWriter{clk: clk, header: http.Header{}}
	now := clk.Now()
	if held, err := p.write(context.Background(), w, "default", body); err != nil || held != 0 {
		t.Fatalf("unreserved subscriber's response: held %v, %v", held, err)
	}
	if w.body.Len() != len(body) || !w.writes[len(w.writes)-1].at.Equal(now) {
		t.Fatalf("unreserved subscriber's response paced: %+v", w.writes)
	}
}

// A client that goes away while its response is paced ends the write at
// once, with the context's error: the handler does not wait out the pace.
func TestPacedWriteStopsWhenTheClientGoes(t *testing.T) {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	p := pacerFor(t, paceConfig, clk)
	w := &timedWriter{clk: clk, header: http.Header{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.write(ctx, w, "a", make([]byte, 1<<20))
		done <- err
	}()
	if err := clk.BlockUntilContext(context.Background(), 1); err != nil { // the second chunk waits
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("write returned %v, want context.Canceled", err)
	}
	if w.body.Len() != gage.DefaultShapeChunk {
		t.Fatalf("%d bytes written, want only the first chunk", w.body.Len())
	}
}

// Through a real HTTP server, a paced response arrives whole, with its
// Content-Length, for plain and passthrough routes alike, and the time it
// was held is counted.
func TestPacedResponseThroughTheGateway(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 40_000)
	f := &fakeCaller{answer: func(_ context.Context, c call) (*neptune.Response, error) {
		if c.method == "http" {
			h := http.Header{"Content-Length": {"40000"}}
			return &neptune.Response{Body: adapter.MarshalResponse(http.StatusCreated, h, body)}, nil
		}
		return &neptune.Response{Body: body}, nil
	}}
	g, reg := start(t, paceConfig+"  - {path_prefix: /web, service: web, method: http, passthrough: true}\n", f, nil)
	srv := httptest.NewServer(g)
	defer srv.Close()
	for path, status := range map[string]int{"/x": 200, "/web": 201} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Host = "a.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != status || resp.ContentLength != int64(len(body)) || !bytes.Equal(got, body) {
			t.Fatalf("%s: status %d, Content-Length %d, %d bytes (%v); want %d and the %d bytes", path, resp.StatusCode, resp.ContentLength, len(got), err, status, len(body))
		}
	}
	// Each response's second and third chunks waited for the pace, 131
	// ms in all at 1.25 x 200 KB/s, less what the writes themselves took.
	if held := value(t, reg, "neptune_gateway_paced_seconds_total", "subscriber", "a"); held <= 0 {
		t.Errorf("paced_seconds_total %v after two paced responses, want > 0", held)
	}
}

// Pacing settings are checked, naming the field.
func TestPaceConfigErrors(t *testing.T) {
	for y, field := range map[string]string{
		"pace_headroom: 0.5":                      "pace_headroom",
		"pace_max_delay: -1s":                     "pace_max_delay",
		"pace_responses: true\nunit: {cpu: 10ms}": "pace_responses",
	} {
		_, err := ParseConfig([]byte("capacity_grps: 10\nroutes: [{service: s, method: m}]\n" + y))
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(field+":")) {
			t.Errorf("%q: error %v, want one naming %s", y, err, field)
		}
	}
}
