package gagebench

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// flow is one subscriber's open-loop Poisson arrivals: rate requests per
// second, each sent to one of targets (weights, one per target, chosen by
// smooth weighted round robin so the split is exact) with Host host.
type flow struct {
	sub     string
	host    string
	rate    float64
	targets []string
	weights []float64
	// moved, if set and holding a target index, sends that target's share
	// to target 0 from then on: its clients moved after a kill.
	moved *atomic.Bool
	// body, if set, draws each request's body (else all send the
	// section's); received, if set, is told each read of an answer's
	// bytes, as they arrive.
	body     func(*rand.Rand) []byte
	received func(at time.Time, n int)
}

// outcome is one request: who sent it where, when it was due and sent,
// and the answer (0: no answer, a transport error).
type outcome struct {
	sub     string
	target  int
	due     time.Time
	late    time.Duration // how late it left, against due
	latency time.Duration
	// transfer is the time from an answer's first bytes to its last, for
	// flows that watch the bytes arrive (flow.received).
	transfer time.Duration
	code     int
}

// drive runs flows from start until ctx ends and returns every outcome.
// The arrivals are drawn from seed; a request is sent at its due time
// whatever the answers to earlier ones (open loop), so a slow contender
// cannot slow the load it is given.
func drive(ctx context.Context, hc *http.Client, flows []flow, path string, body []byte, seed uint64) []outcome {
	var mu sync.Mutex
	var out []outcome
	var wg sync.WaitGroup
	for fi, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(fi)))
			credit := make([]float64, len(f.targets))
			due := time.Now()
			for {
				due = due.Add(time.Duration(rng.ExpFloat64() / f.rate * float64(time.Second)))
				t := time.NewTimer(time.Until(due))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				best := 0
				for i := range f.targets {
					credit[i] += f.weights[i]
					if credit[i] > credit[best] {
						best = i
					}
				}
				credit[best]--
				target := best
				if f.moved != nil && f.moved.Load() {
					target = 0
				}
				b := body
				if f.body != nil {
					b = f.body(rng)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := outcome{sub: f.sub, target: best, due: due, late: time.Since(due)}
					req, err := http.NewRequest("POST", "http://"+f.targets[target]+path, bytes.NewReader(b))
					if err == nil {
						req.Host = f.host
						sent := time.Now()
						if resp, err := hc.Do(req); err == nil {
							o.transfer = readAll(resp.Body, f.received)
							resp.Body.Close()
							o.code = resp.StatusCode
						}
						o.latency = time.Since(sent)
					}
					mu.Lock()
					out = append(out, o)
					mu.Unlock()
				}()
			}
		}()
	}
	<-ctx.Done()
	wg.Wait()
	return out
}

// readAll reads an answer's body to its end, telling received (if set) of
// each read as it happens, and returns the time from the first bytes to
// the last.
func readAll(body io.Reader, received func(time.Time, int)) time.Duration {
	if received == nil {
		_, _ = io.Copy(io.Discard, body)
		return 0
	}
	var first, last time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			last = time.Now()
			if first.IsZero() {
				first = last
			}
			received(last, n)
		}
		if err != nil {
			return last.Sub(first)
		}
	}
}

// lateness is how late, on average, requests due in [from, to) left:
// the client's own starvation, not the contender's.
func lateness(os []outcome, from, to time.Time) time.Duration {
	var sum time.Duration
	n := 0
	for _, o := range os {
		if !o.due.Before(from) && o.due.Before(to) {
			sum += o.late
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// tally counts, per subscriber, the requests due in [from, to): all of
// them, those answered 200 and those answered 429.
type tally struct{ asked, ok, dropped, other int }

func count(os []outcome, from, to time.Time) map[string]*tally {
	m := map[string]*tally{}
	for _, o := range os {
		if o.due.Before(from) || !o.due.Before(to) {
			continue
		}
		t := m[o.sub]
		if t == nil {
			t = &tally{}
			m[o.sub] = t
		}
		t.asked++
		switch o.code {
		case http.StatusOK:
			t.ok++
		case http.StatusTooManyRequests:
			t.dropped++
		default:
			t.other++
		}
	}
	return m
}

// newHTTPClient is a client with room for every request in flight on
// kept-alive HTTP/1.1 connections.
func newHTTPClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute, DisableCompression: true,
	}}
}
