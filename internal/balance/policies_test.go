package balance

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

func mustNew(t *testing.T, cfg Config, seed uint64) Policy {
	t.Helper()
	p, err := New(cfg, newRNG(seed))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func withPolicy(name string) Config {
	c := DefaultConfig()
	c.Policy = name
	return c
}

func replicas(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string(rune('a' + i))
	}
	return out
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"default", func(*Config) {}, ""},
		{"zero value: the defaults", func(c *Config) { *c = Config{} }, ""},
		{"wait for every answer", func(c *Config) { c.Discard = -1 }, ""},
		{"unknown policy", func(c *Config) { c.Policy = "jsq" }, "Policy"},
		{"poll size", func(c *Config) { c.PollSize = -1 }, "PollSize must be >= 0 (0: the default), got -1"},
		{"probe size", func(c *Config) { c.ProbeSize = -1 }, "ProbeSize"},
		{"broadcast interval", func(c *Config) { c.BroadcastInterval = -1 }, "BroadcastInterval"},
		{"probe rate", func(c *Config) { c.ProbeRate = -1 }, "ProbeRate"},
		{"pool size", func(c *Config) { c.PoolSize = -1 }, "PoolSize"},
		{"probe age", func(c *Config) { c.ProbeAge = -1 }, "ProbeAge"},
		{"probe reuse", func(c *Config) { c.ProbeReuse = -1 }, "ProbeReuse"},
		{"hot quantile", func(c *Config) { c.HotQuantile = 1.5 }, "HotQuantile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.HasPrefix(err.Error(), "balance: ") {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.field)
			}
			if _, err := New(c, newRNG(1)); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
	c := DefaultConfig()
	c.Policy = "jsq"
	if err := c.Validate(); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown policy error %v does not wrap ErrUnknownPolicy", err)
	}
}

func TestNewEveryName(t *testing.T) {
	for _, name := range Names {
		p := mustNew(t, withPolicy(name), 1)
		cands := replicas(4)
		p.Plan(t0, cands)
		if got := p.Choose(t0, cands, nil); !slices.Contains(cands, got) {
			t.Errorf("%s chose %q, not a candidate", name, got)
		}
	}
}

func TestRandomIsUniformAndSeeded(t *testing.T) {
	cands := replicas(4)
	run := func(seed uint64) []string {
		p := mustNew(t, withPolicy(NameRandom), seed)
		var out []string
		for range 4000 {
			if pl := p.Plan(t0, cands); len(pl.Poll) != 0 {
				t.Fatalf("random polls %v", pl.Poll)
			}
			out = append(out, p.Choose(t0, cands, nil))
		}
		return out
	}
	a := run(7)
	if !slices.Equal(a, run(7)) {
		t.Fatal("same seed gave different choices")
	}
	counts := map[string]int{}
	for _, r := range a {
		counts[r]++
	}
	for _, c := range cands {
		if counts[c] < 900 || counts[c] > 1100 {
			t.Errorf("replica %s chosen %d/4000 times, want ≈1000", c, counts[c])
		}
	}
}

func TestPollingPlan(t *testing.T) {
	cfg := withPolicy(NamePolling)
	for _, tc := range []struct {
		n, d     int
		discard  time.Duration
		wantN    int
		wantWait time.Duration
	}{
		{n: 16, d: 3, discard: 10 * time.Millisecond, wantN: 3, wantWait: 10 * time.Millisecond},
		{n: 2, d: 3, discard: 10 * time.Millisecond, wantN: 2, wantWait: 10 * time.Millisecond},
		{n: 16, d: 8, discard: -1, wantN: 8, wantWait: WaitAllCap},
		{n: 16, d: 3, discard: 0, wantN: 3, wantWait: 10 * time.Millisecond}, // the default
	} {
		cfg.PollSize, cfg.Discard = tc.d, tc.discard
		p := mustNew(t, cfg, 3)
		cands := replicas(tc.n)
		for range 100 {
			pl := p.Plan(t0, cands)
			if len(pl.Poll) != tc.wantN || pl.Wait != tc.wantWait {
				t.Fatalf("n=%d d=%d: Plan = %d polls, wait %v; want %d, %v", tc.n, tc.d, len(pl.Poll), pl.Wait, tc.wantN, tc.wantWait)
			}
			seen := map[string]bool{}
			for _, r := range pl.Poll {
				if seen[r] || !slices.Contains(cands, r) {
					t.Fatalf("Plan polls %v: duplicates or non-candidates", pl.Poll)
				}
				seen[r] = true
			}
		}
	}
}

func TestPollingChoose(t *testing.T) {
	cands := replicas(4) // a b c d
	for _, tc := range []struct {
		name    string
		answers []Load
		want    []string // acceptable choices
	}{
		{"least queue", []Load{{Replica: "a", Queue: 3}, {Replica: "b", Queue: 1}, {Replica: "c", Queue: 2}}, []string{"b"}},
		{"ties", []Load{{Replica: "a", Queue: 1}, {Replica: "b", Queue: 1}, {Replica: "c", Queue: 2}}, []string{"a", "b"}},
		{"ignores non-candidates", []Load{{Replica: "z", Queue: 0}, {Replica: "c", Queue: 5}}, []string{"c"}},
		{"no answers", nil, cands},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, withPolicy(NamePolling), 5)
			got := map[string]int{}
			for range 400 {
				got[p.Choose(t0, cands, tc.answers)]++
			}
			for r := range got {
				if !slices.Contains(tc.want, r) {
					t.Fatalf("chose %q, want one of %v", r, tc.want)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("chose %v over 400 calls, want every one of %v", got, tc.want)
			}
		})
	}
}

func TestRoundRobin(t *testing.T) {
	p := mustNew(t, withPolicy(NameRoundRobin), 1)
	cands := replicas(3)
	var got []string
	for range 7 {
		got = append(got, p.Choose(t0, cands, nil))
	}
	if want := []string{"a", "b", "c", "a", "b", "c", "a"}; !slices.Equal(got, want) {
		t.Fatalf("round robin chose %v, want %v", got, want)
	}
	// A shrunken candidate list must still yield a candidate.
	if r := p.Choose(t0, cands[:1], nil); r != "a" {
		t.Fatalf("single candidate: chose %q", r)
	}
}

// TestReportedLoads covers the policies that choose from pushed loads.
func TestReportedLoads(t *testing.T) {
	for _, name := range []string{NameBroadcast, NameOracle} {
		t.Run(name, func(t *testing.T) {
			p := mustNew(t, withPolicy(name), 2)
			cands := replicas(3)
			for _, l := range []Load{{Replica: "a", Queue: 4}, {Replica: "b", Queue: 2}, {Replica: "c", Queue: 3}} {
				p.Report(t0, l)
			}
			// Poll answers are not this policy's information source.
			if pl := p.Plan(t0, cands); len(pl.Poll) != 0 {
				t.Fatalf("%s polls %v", name, pl.Poll)
			}
			for range 20 {
				if r := p.Choose(t0, cands, []Load{{Replica: "a", Queue: 0}}); r != "b" {
					t.Fatalf("chose %q, want b (least reported)", r)
				}
			}
			// Its own sends do not change the perceived load: flocking.
			p.Sent(t0, "b")
			if r := p.Choose(t0, cands, nil); r != "b" {
				t.Fatalf("after Sent: chose %q, want b", r)
			}
			p.Report(t0.Add(time.Millisecond), Load{Replica: "b", Queue: 9})
			if r := p.Choose(t0, cands, nil); r != "c" {
				t.Fatalf("after new report: chose %q, want c", r)
			}
			p.Report(t0, Load{Replica: "a", Queue: 3})
			got := map[string]int{}
			for range 200 {
				got[p.Choose(t0, cands, nil)]++
			}
			if got["a"] == 0 || got["c"] == 0 || got["b"] != 0 {
				t.Fatalf("ties a=c=3: choices %v, want a and c only", got)
			}
			// A replica that never reported counts as idle.
			if r := p.Choose(t0, append(cands, "new"), nil); r != "new" {
				t.Fatalf("chose %q, want the unreported replica", r)
			}
		})
	}
}

func TestLocalP2C(t *testing.T) {
	p := mustNew(t, withPolicy(NameLocalP2C), 4)
	cands := replicas(2)
	for range 3 {
		p.Sent(t0, "a")
	}
	for range 50 {
		if r := p.Choose(t0, cands, nil); r != "b" {
			t.Fatalf("chose %q, want b (fewer outstanding)", r)
		}
	}
	for range 3 {
		p.Done(t0, "a", time.Millisecond)
	}
	p.Sent(t0, "b")
	if r := p.Choose(t0, cands, nil); r != "a" {
		t.Fatalf("after completions: chose %q, want a", r)
	}
	// With many candidates it compares only two: the busiest replica is
	// never chosen, every other one sometimes is.
	p = mustNew(t, withPolicy(NameLocalP2C), 4)
	cands = replicas(4)
	for range 5 {
		p.Sent(t0, "d")
	}
	got := map[string]int{}
	for range 600 {
		got[p.Choose(t0, cands, nil)]++
	}
	if got["d"] != 0 || got["a"] == 0 || got["b"] == 0 || got["c"] == 0 {
		t.Fatalf("choices %v: want a, b, c and never d", got)
	}
	if r := p.Choose(t0, []string{"d"}, nil); r != "d" {
		t.Fatalf("single candidate: chose %q", r)
	}
}
