package balance

import (
	"slices"
	"testing"
	"time"
)

func newPrequalForTest(t *testing.T, probes int) Policy {
	t.Helper()
	c := withPolicy(NamePrequal)
	c.ProbeSize = probes
	c.ReuseWindow = 20 * time.Millisecond
	return mustNew(t, c, 9)
}

func TestPrequalPlanSkipsFreshReplicas(t *testing.T) {
	p := newPrequalForTest(t, 2)
	cands := replicas(4)
	pl := p.Plan(t0, cands)
	if len(pl.Poll) != 2 || pl.Wait != DefaultConfig().Discard {
		t.Fatalf("Plan = %+v, want 2 polls waiting %v", pl, DefaultConfig().Discard)
	}
	var answers []Load
	for _, r := range pl.Poll {
		answers = append(answers, Load{Replica: r, Queue: 1})
	}
	p.Choose(t0, cands, answers)
	next := p.Plan(t0.Add(time.Millisecond), cands)
	for _, r := range next.Poll {
		if slices.Contains(pl.Poll, r) {
			t.Fatalf("re-polled %s, which has a fresh answer (second plan %v)", r, next.Poll)
		}
	}
	for _, r := range next.Poll {
		p.Report(t0.Add(2*time.Millisecond), Load{Replica: r, Queue: 2, RTT: time.Millisecond})
	}
	if got := p.Plan(t0.Add(3*time.Millisecond), cands); len(got.Poll) != 0 {
		t.Fatalf("every answer fresh, yet Plan polls %v", got.Poll)
	}
	if got := p.Plan(t0.Add(25*time.Millisecond), cands); len(got.Poll) != 2 {
		t.Fatalf("after the reuse window, Plan polls %v, want 2", got.Poll)
	}
}

func TestPrequalReusesAndCorrects(t *testing.T) {
	p := newPrequalForTest(t, 3)
	cands := replicas(3) // a b c
	if r := p.Choose(t0, cands, []Load{{Replica: "a", Queue: 0}, {Replica: "b", Queue: 1}, {Replica: "c", Queue: 3}}); r != "a" {
		t.Fatalf("chose %q, want a", r)
	}
	p.Sent(t0, "a")
	p.Sent(t0, "a") // a now ≈ 2 by our own sends, b still 1
	now := t0.Add(5 * time.Millisecond)
	if r := p.Choose(now, cands, nil); r != "b" {
		t.Fatalf("with pooled answers corrected by own sends: chose %q, want b", r)
	}
	p.Done(now, "a", time.Millisecond)
	p.Done(now, "a", time.Millisecond) // a back to 0
	if r := p.Choose(now, cands, nil); r != "a" {
		t.Fatalf("after own completions: chose %q, want a", r)
	}
	// A fresh answer replaces the pooled one.
	if r := p.Choose(now, cands, []Load{{Replica: "a", Queue: 5}}); r != "b" {
		t.Fatalf("after a new answer for a: chose %q, want b", r)
	}
	// Past the window nothing is known: the choice is random.
	later := t0.Add(time.Second)
	got := map[string]int{}
	for range 300 {
		got[p.Choose(later, cands, nil)]++
	}
	if len(got) != 3 {
		t.Fatalf("expired pool: choices %v, want all three", got)
	}
	// A late answer (fed back through Report) is used.
	p.Report(later, Load{Replica: "c", Queue: 0, RTT: 12 * time.Millisecond})
	if r := p.Choose(later, cands, []Load{{Replica: "a", Queue: 1}}); r != "c" {
		t.Fatalf("late answer for c ignored: chose %q", r)
	}
}

func TestPrequalAvoidsSlowReplica(t *testing.T) {
	p := newPrequalForTest(t, 4)
	cands := replicas(4)
	now := t0
	// Teach it that a takes 100 ms per request and b, c, d 10 ms.
	for range 5 {
		for _, r := range cands {
			p.Choose(now, []string{r}, []Load{{Replica: r, Queue: 0}})
			p.Sent(now, r)
			lat := 10 * time.Millisecond
			if r == "a" {
				lat = 100 * time.Millisecond
			}
			p.Done(now, r, lat)
		}
		now = now.Add(time.Second)
	}
	// a is idle but ten times slower: two queued at b (3 × 10 ms) beat it.
	answers := []Load{{Replica: "a", Queue: 0}, {Replica: "b", Queue: 2}, {Replica: "c", Queue: 4}, {Replica: "d", Queue: 5}}
	if r := p.Choose(now, cands, answers); r != "b" {
		t.Fatalf("chose %q, want b over the slow idle a", r)
	}
	// But not at any price: a long enough queue elsewhere sends work to a.
	answers = []Load{{Replica: "a", Queue: 0}, {Replica: "b", Queue: 12}, {Replica: "c", Queue: 12}, {Replica: "d", Queue: 12}}
	if r := p.Choose(now.Add(time.Second), cands, answers); r != "a" {
		t.Fatalf("chose %q, want a when the others are 13× as deep", r)
	}
}
