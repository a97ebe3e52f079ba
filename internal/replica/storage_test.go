package replica

import (
	"slices"
	"testing"
	"time"
)

// TestFullStorageHandsOverAndCatchesUpAfter: a primary whose disk fills
// hands its role to an in-sync replica, stays in its live set as a
// secondary (it takes the new primary's no-op) until a write comes, takes
// no write while full (it leaves the live set and the partition commits
// without it), never takes
// the role back by an election or a transfer, and once space returns
// catches up and gets its role back by priority; every acknowledged
// write is on every replica.
func TestFullStorageHandsOverAndCatchesUpAfter(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	for range 5 {
		c.write("a")
	}
	c.settle(200 * time.Millisecond)
	a := c.nodes["a"]
	a.r.SetStorageFull(c.local("a", c.now), true)
	c.process(a)
	c.settle(500 * time.Millisecond)
	p := c.primary()
	if p == "" || p == "a" {
		t.Fatalf("primary %q after a's disk filled, want b or c", p)
	}
	// Past the ack timeout: a took the new primary's no-op, so it is in
	// sync (it was dropped from the live set when it took no entries).
	c.settle(2 * time.Second)
	st := a.r.Status()
	if st.Role != Secondary || !slices.Contains(c.nodes[p].r.Status().Live, ID("a")) {
		t.Fatalf("full replica with every write not a live secondary after the handover: %+v", st)
	}
	held := st.Last
	for range 20 {
		c.write(p)
		c.settle(100 * time.Millisecond)
	}
	if st := a.r.Status(); st.Last != held || st.Role == Primary {
		t.Fatalf("full replica took entries or the role: last %d (was %d), %+v", st.Last, held, st)
	}
	if st := c.nodes[p].r.Status(); st.Commit <= held {
		t.Fatalf("partition stopped committing while one replica was full: %+v", st)
	}
	a.r.SetStorageFull(c.local("a", c.now), false)
	c.settle(3 * time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q once space returned, want a back (priority)", c.primary())
	}
	c.checkAnswered()
	c.checkConverged()
}

// TestDrainingPrimaryHandsOverAndStaysSecondary: a primary whose node is
// leaving hands its role to an in-sync replica at once, never takes it
// back (by election or by priority transfer, although its priority is the
// highest), keeps taking entries, and loses no acknowledged write.
func TestDrainingPrimaryHandsOverAndStaysSecondary(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	for range 5 {
		c.write("a")
	}
	c.settle(200 * time.Millisecond)
	a := c.nodes["a"]
	a.r.SetDraining(c.local("a", c.now), true)
	c.process(a)
	c.settle(500 * time.Millisecond)
	p := c.primary()
	if p == "" || p == "a" {
		t.Fatalf("primary %q after a began draining, want b or c", p)
	}
	for range 20 {
		c.write(p)
		c.settle(100 * time.Millisecond)
	}
	c.settle(3 * time.Second) // several transfer and election timeouts
	if got := c.primary(); got != p || a.r.Status().Role == Primary {
		t.Fatalf("primary %q, a %v: the draining replica took its role back", got, a.r.Status().Role)
	}
	if st, pst := a.r.Status(), c.nodes[p].r.Status(); st.Last != pst.Last {
		t.Fatalf("draining replica stopped taking entries: last %d, primary's %d", st.Last, pst.Last)
	}
	c.checkAnswered()
	c.checkConverged()
}
