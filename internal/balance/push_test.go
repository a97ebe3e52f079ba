package balance

import (
	"slices"
	"testing"
	"time"
)

func TestPushNeverPolls(t *testing.T) {
	p := mustNew(t, withPolicy(NamePush), 1)
	if pl := p.Plan(t0, replicas(4)); len(pl.Poll) != 0 || len(pl.Probe) != 0 {
		t.Fatalf("plan %+v, want no poll and no probe", pl)
	}
}

func TestPushSpendsEachIdleTokenOnce(t *testing.T) {
	p := mustNew(t, withPolicy(NamePush), 1)
	cands := replicas(4)
	for _, r := range []string{"b", "c", "d"} {
		p.Report(t0, Load{Replica: r, Queue: 2})
	}
	p.Report(t0, Load{Replica: "b", Queue: 0})
	p.Report(t0, Load{Replica: "c", Queue: 0})
	var got []string
	for range 2 {
		r := p.Choose(t0, cands, nil)
		p.Sent(t0, r)
		got = append(got, r)
	}
	// Newest token first, each once; then the least corrected queue: "a"
	// was never heard of and has nothing of ours in flight (b and c have
	// one each, over a pushed 0).
	if got[0] != "c" || got[1] != "b" {
		t.Fatalf("choices %v, want the newest idle token first: [c b]", got)
	}
	if r := p.Choose(t0, cands, nil); r != "a" {
		t.Fatalf("after the tokens: %q, want a (queue 0 against 1, 1, 2)", r)
	}
}

func TestPushBusyVoidsIdleToken(t *testing.T) {
	p := mustNew(t, withPolicy(NamePush), 1)
	cands := []string{"a", "b"}
	p.Report(t0, Load{Replica: "a", Queue: 1})
	p.Report(t0, Load{Replica: "b", Queue: 0})
	p.Report(t0.Add(time.Millisecond), Load{Replica: "b", Queue: 3})
	if r := p.Choose(t0, cands, nil); r != "a" {
		t.Fatalf("chose %q: b's idle token outlived its busy push", r)
	}
}

func TestPushCorrectsByOwnTraffic(t *testing.T) {
	p := mustNew(t, withPolicy(NamePush), 1)
	cands := []string{"a", "b"}
	p.Report(t0, Load{Replica: "a", Queue: 1})
	p.Report(t0, Load{Replica: "b", Queue: 2})
	p.Sent(t0, "a")
	p.Sent(t0, "a") // a: 1 + 2 sent = 3 > b's 2
	if r := p.Choose(t0, cands, nil); r != "b" {
		t.Fatalf("chose %q, want b once our own sends to a count", r)
	}
	p.Done(t0, "a", time.Millisecond)
	p.Done(t0, "a", time.Millisecond) // a back to 1
	if r := p.Choose(t0, cands, nil); r != "a" {
		t.Fatalf("chose %q, want a once our requests to it are done", r)
	}
}

// A node offers Names; push would wait there for pushes no replica sends.
func TestPushIsForTheSimulatorOnly(t *testing.T) {
	if slices.Contains(Names, NamePush) {
		t.Fatalf("Names %v offers %s, but no node pushes its load yet", Names, NamePush)
	}
	if err := withPolicy(NamePush).Validate(); err != nil {
		t.Fatalf("the simulator's push policy does not validate: %v", err)
	}
}
