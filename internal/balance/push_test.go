package balance

import (
	"slices"
	"testing"
	"time"
)

func TestPushNeverPollsAndSubscribesToEveryCandidate(t *testing.T) {
	p := mustNew(t, withPolicy(NamePush), 1)
	cands := replicas(4)
	if pl := p.Plan(t0, cands); len(pl.Poll) != 0 || len(pl.Probe) != 0 || !slices.Equal(pl.Subscribe, cands) {
		t.Fatalf("plan %+v, want no poll, no probe and a subscription to each of %v", pl, cands)
	}
}

// withTokens is the push policy as join-idle-queue runs it.
func withTokens() Config {
	c := withPolicy(NamePush)
	c.IdleTokens = true
	return c
}

func TestPushSpendsEachIdleTokenOnce(t *testing.T) {
	p := mustNew(t, withTokens(), 1)
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
	p := mustNew(t, withTokens(), 1)
	cands := []string{"a", "b"}
	p.Report(t0, Load{Replica: "a", Queue: 1})
	p.Report(t0, Load{Replica: "b", Queue: 0})
	p.Report(t0.Add(time.Millisecond), Load{Replica: "b", Queue: 3})
	if r := p.Choose(t0, cands, nil); r != "a" {
		t.Fatalf("chose %q: b's idle token outlived its busy push", r)
	}
}

// Nodes push every change to every subscriber, so by default a pushed 0
// is no token: every client would hold it and spend it at once. The
// choice follows the queue corrected by this client's own sends.
func TestPushWithoutTokensFollowsCorrectedQueues(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{{withPolicy(NamePush), "a"}, {withTokens(), "b"}} {
		p := mustNew(t, tc.cfg, 1)
		p.Report(t0, Load{Replica: "a", Queue: 1})
		p.Report(t0, Load{Replica: "b", Queue: 0})
		p.Sent(t0, "b")
		p.Sent(t0, "b") // b: 0 + 2 sent = 2 > a's 1
		if r := p.Choose(t0, []string{"a", "b"}, nil); r != tc.want {
			t.Errorf("IdleTokens %v: chose %q, want %q", tc.cfg.IdleTokens, r, tc.want)
		}
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
