package replica

import (
	"testing"
	"time"
)

// TestAReplicaSaysWhenItLostContact: a secondary that still sends but
// receives nothing (a one-way cut) reports lost contact once its primary
// has been silent for AckTimeout, since the primary's last message; a
// primary cut off from its majority reports no quorum from half its lease
// on, and once it stepped down, lost contact since its quorum last
// answered. Replicas in touch report nothing.
func TestAReplicaSaysWhenItLostContact(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	judge := func(id ID) (ContactState, time.Time) {
		return JudgeContact(c.nodes[id].r.Status(), c.now, c.cfg.AckTimeout, c.cfg.Lease)
	}
	allOK := func(when string) {
		t.Helper()
		for _, id := range []ID{"a", "b", "c"} {
			if s, since := judge(id); s != ContactOK {
				t.Fatalf("%s: %s reports %s since %v", when, id, s, since)
			}
		}
	}
	allOK("settled")
	beat := c.cfg.Heartbeat

	// c can send, not receive.
	cut := c.now
	c.blocked[[2]ID{"a", "c"}], c.blocked[[2]ID{"b", "c"}] = true, true
	for c.now.Before(cut.Add(c.cfg.AckTimeout - beat)) {
		c.step()
		if s, _ := judge("c"); s != ContactOK {
			t.Fatalf("c reports %s %v after the cut, before AckTimeout (%v)", s, c.now.Sub(cut), c.cfg.AckTimeout)
		}
	}
	for s, _ := judge("c"); s != ContactLost; s, _ = judge("c") {
		if c.now.After(cut.Add(c.cfg.AckTimeout + beat)) {
			t.Fatalf("c still reports %s %v after the cut", s, c.now.Sub(cut))
		}
		c.step()
	}
	if _, since := judge("c"); since.After(cut) || since.Before(cut.Add(-beat)) {
		t.Fatalf("c lost contact since %v, the cut was at %v (heartbeat %v)", since.Sub(cut), cut, beat)
	}
	if s := c.nodes["a"].r.Status(); s.Role != Primary || c.primary() != "a" {
		t.Fatalf("a one-way cut of c moved the primary: %+v", s)
	}
	for _, id := range []ID{"a", "b"} {
		if s, _ := judge(id); s != ContactOK {
			t.Fatalf("%s reports %s while a and b are in touch", id, s)
		}
	}
	c.heal()
	c.settle(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q after healing", c.primary())
	}
	allOK("healed")

	// a is cut off from both.
	c.split([]ID{"a"}, []ID{"b", "c"})
	cut = c.now
	sawNoQuorum := false
	for c.nodes["a"].r.Status().Role == Primary {
		s, _ := judge("a")
		switch {
		case s == ContactNoQuorum:
			sawNoQuorum = true
		case s != ContactOK:
			t.Fatalf("the primary reports %s", s)
		case c.now.After(cut.Add(c.cfg.Lease/2 + beat)):
			t.Fatalf("the cut-off primary still reports contact %v after the cut", c.now.Sub(cut))
		}
		c.step()
	}
	if !sawNoQuorum {
		t.Fatal("the cut-off primary stepped down without ever reporting no quorum")
	}
	// Stepped down at Lease: lost contact once AckTimeout passed since
	// its quorum last answered, not since the primary it heard before it
	// led.
	for s, _ := judge("a"); s != ContactLost; s, _ = judge("a") {
		if c.now.After(cut.Add(max(c.cfg.AckTimeout, c.cfg.Lease) + beat)) {
			t.Fatalf("the former primary still reports %s %v after the cut", s, c.now.Sub(cut))
		}
		c.step()
	}
	if _, since := judge("a"); since.After(cut) || since.Before(cut.Add(-beat)) {
		t.Fatalf("the former primary lost contact since %v after the cut, want about the cut", since.Sub(cut))
	}
}
