package replica

import (
	"testing"
	"time"
)

// TestFollowerHearingThePrimaryRefusesPreVotes: b no longer hears the
// primary a (the link a→b drops everything) and asks for pre-votes; c,
// which still hears a, refuses them (voter grace), and a, the primary,
// refuses too, so nobody's epoch moves and a stays primary however long
// b campaigns (pre-vote: a replica cut off on its own disrupts nothing).
func TestFollowerHearingThePrimaryRefusesPreVotes(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	epoch := c.nodes["a"].r.Status().Epoch
	c.blocked[[2]ID{"a", "b"}] = true
	preVotes := 0
	for range 600 { // 3 s
		c.step()
		if b := c.nodes["b"].r; b.preVoting {
			preVotes++
			if len(b.preGrants) > 0 {
				t.Fatalf("b was granted a pre-vote by %v while they hear the primary", b.preGrants)
			}
		}
	}
	if preVotes == 0 {
		t.Fatal("b never asked for a pre-vote: the test shows nothing")
	}
	for _, id := range []ID{"a", "c"} {
		if s := c.nodes[id].r.Status(); s.Epoch != epoch {
			t.Fatalf("%s at epoch %d, want %d: a cut-off replica's campaign moved it", id, s.Epoch, epoch)
		}
	}
	if p := c.primary(); p != "a" {
		t.Fatalf("primary %q, want a", p)
	}
}

// TestLossyLinksElectNobody: 10% of all messages lost and every one
// delayed up to 60 ms (so they reorder), writes flowing, for a simulated
// minute on the manual clock: no election (issue 28: at most one a
// minute), and writes keep committing.
func TestLossyLinksElectNobody(t *testing.T) {
	c := settled(t, Level3, []int{3, 2, 1})
	epoch := c.nodes["a"].r.Status().Epoch
	c.drop, c.delay = 0.1, 60*time.Millisecond
	for i := range 12000 { // 60 s of 5 ms steps
		if i%20 == 0 {
			c.write(c.primary())
		}
		c.step()
	}
	for _, id := range c.order {
		if s := c.nodes[id].r.Status(); s.Epoch != epoch {
			t.Fatalf("%s at epoch %d after a minute of lossy links, want %d", id, s.Epoch, epoch)
		}
	}
	if c.nodes["a"].r.Status().Commit < 500 {
		t.Fatalf("only %d writes committed in a minute", c.nodes["a"].r.Status().Commit)
	}
}

// TestStragglerLeavesTheLiveSet: c's acknowledgements stop arriving (its
// link to a stalls) while b's arrive; a write commits once c has held it
// back straggleAfter, not after AckTimeout, and c rejoins the live set
// when its link works again.
func TestStragglerLeavesTheLiveSet(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	a := c.nodes["a"].r
	c.blocked[[2]ID{"c", "a"}] = true
	before := a.Status().Commit
	c.write("a")
	start := c.now
	for a.Status().Commit <= before {
		if c.now.Sub(start) > time.Second {
			t.Fatal("the write did not commit within a second")
		}
		c.step()
	}
	if took := c.now.Sub(start); took >= c.cfg.AckTimeout || took > a.straggleAfter()+50*time.Millisecond {
		t.Fatalf("committed after %v: want about straggleAfter (%v), well before AckTimeout (%v)", took, a.straggleAfter(), c.cfg.AckTimeout)
	}
	if a.progress["c"].inSync {
		t.Fatal("c still in the live set")
	}
	delete(c.blocked, [2]ID{"c", "a"})
	for range 100 {
		c.step()
	}
	if !a.progress["c"].inSync {
		t.Fatal("c did not rejoin the live set once its acknowledgements arrived")
	}
}

// TestSilenceLimitAdaptsToGaps: on a steady link a follower counts its
// primary gone after AckTimeout of silence; after the primary's appends
// came with a gap of AckTimeout/2 (a stalled connection), it waits three
// times that, but never more than 2·AckTimeout; the gap is forgotten after
// two gap windows of steady appends; a gap longer than 2·AckTimeout (an
// outage) is not counted.
func TestSilenceLimitAdaptsToGaps(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	b := c.nodes["b"].r
	ack := c.cfg.AckTimeout
	if got := b.SilenceLimit(c.now); got != ack {
		t.Fatalf("steady link: limit %v, want AckTimeout %v", got, ack)
	}
	if !b.primaryLive(b.lastHeard.Add(ack-time.Millisecond)) || b.primaryLive(b.lastHeard.Add(ack)) {
		t.Fatal("steady link: the primary must count as gone exactly after AckTimeout of silence")
	}
	gap := func(d time.Duration) {
		c.blocked[[2]ID{"a", "b"}] = true
		for range int(d / (5 * time.Millisecond)) {
			c.step()
		}
		c.heal()
		for range 20 {
			c.step()
		}
	}
	gap(ack / 2)
	limit := b.SilenceLimit(c.now)
	if want := 3 * ack / 2; limit < want || limit > want+3*(c.cfg.Heartbeat+5*time.Millisecond) {
		t.Fatalf("after a gap of %v: limit %v, want about %v", ack/2, limit, want)
	}
	if !b.primaryLive(b.lastHeard.Add(limit-time.Millisecond)) || b.primaryLive(b.lastHeard.Add(limit)) {
		t.Fatal("the primary must count as live until the limit, gone at it")
	}
	gap(ack) // a longer gap raises it to the bound
	if got := b.SilenceLimit(c.now); got != 2*ack {
		t.Fatalf("after a gap of %v: limit %v, want the bound 2·AckTimeout", ack, got)
	}
	for range 4200 { // 21 s of steady appends
		c.step()
	}
	if got := b.SilenceLimit(c.now); got != ack {
		t.Fatalf("after two windows of steady appends: limit %v, want AckTimeout again", got)
	}
	gap(3 * ack) // an outage, not jitter: not counted
	if got := b.SilenceLimit(c.now); got != ack {
		t.Fatalf("after an outage of %v: limit %v, want AckTimeout", 3*ack, got)
	}
	for range 4200 {
		c.step()
	}
	if got := b.SilenceLimit(c.now); got != ack {
		t.Fatalf("after two windows of steady appends: limit %v, want AckTimeout again", got)
	}
}
