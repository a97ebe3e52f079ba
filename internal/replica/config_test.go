package replica

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// joiner adds a node that hosts no replica yet: its shell creates one
// when an append names it (see deliver).
func (c *cluster) joiner(id ID) *node {
	n := &node{id: id, svc: service{seen: map[string]bool{}}, joinable: true}
	c.nodes[id] = n
	c.order = append(c.order, id)
	for _, o := range c.nodes {
		if o.r != nil {
			o.r.SetAlive(id, true)
		}
	}
	return n
}

// change asks the current primary for ch and processes its Ready.
func (c *cluster) change(ch Change) error {
	p := c.primary()
	if p == "" {
		return ErrNoPrimary
	}
	n := c.nodes[p]
	err := n.r.ChangeMembers(c.local(p, c.now), ch)
	c.process(n)
	return err
}

// committedSet is the replica set every live replica has committed, or
// nil if they differ.
func (c *cluster) committedSet() []Peer {
	var set []Peer
	for i, id := range c.up() {
		r := c.nodes[id].r
		if r.Status().Removed {
			continue
		}
		if i > 0 && set != nil && !slices.Equal(set, r.committed.Members) {
			return nil
		}
		set = r.committed.Members
	}
	return set
}

func ids(ps []Peer) []ID {
	var out []ID
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

// until settles in steps of 10 ms, writing at the primary every step,
// until done holds or d passed; it reports whether done held.
func (c *cluster) until(d time.Duration, writes bool, done func() bool) bool {
	for end := c.now.Add(d); c.now.Before(end); {
		if done() {
			return true
		}
		if p := c.primary(); writes && p != "" {
			c.write(p)
		}
		c.tick(10 * time.Millisecond)
		c.flush()
	}
	return done()
}

// TestAddReplicaWhileWriting adds a fourth replica to a partition with a
// write at every step: it joins as a learner, gets the log, serves
// nothing until the primary promoted it, then counts for the majority (3
// of 4), and ends identical to the others.
func TestAddReplicaWhileWriting(t *testing.T) {
	c := newCluster(t, 1, Level3, []int{3, 2, 1}, nil)
	c.settle(500 * time.Millisecond)
	for range 40 {
		c.write(c.primary())
		c.settle(10 * time.Millisecond)
	}
	d := c.joiner("d")
	if err := c.change(Change{Add: "d", Priority: 1}); err != nil {
		t.Fatalf("add: %v", err)
	}
	if err := c.change(Change{Add: "b"}); err != nil {
		t.Fatalf("adding a member again should be a no-op: %v", err)
	}
	ackedBefore := len(c.acked)
	servedAsLearner := false
	ok := c.until(5*time.Second, true, func() bool {
		if d.r != nil {
			pr := c.nodes[c.primary()].r
			if !pr.isVoter("d") && d.r.Status().Role == Secondary {
				servedAsLearner = true
			}
		}
		set := c.committedSet()
		return set != nil && isVoterIn(set, "d") && d.r != nil && d.r.Status().Role == Secondary
	})
	if !ok {
		t.Fatalf("d never became a serving voter: primary %+v", c.nodes[c.primary()].r.Status())
	}
	if servedAsLearner {
		t.Fatal("d served as a learner")
	}
	c.until(200*time.Millisecond, true, func() bool { return false })
	if n := len(c.acked) - ackedBefore; n < 10 || len(c.failed) > 0 {
		t.Fatalf("%d writes acknowledged during and after the change, %d failed", n, len(c.failed))
	}
	if got := c.nodes[c.primary()].r.minLive(); got != 3 {
		t.Fatalf("MinLive with 4 voters is %d, want 3", got)
	}
	c.settle(time.Second)
	c.checkConverged()
	c.checkAnswered()
	// With 4 voters two are not a majority: cut the primary off with one
	// other replica, and it stops committing.
	p := c.primary()
	other := ID("b")
	if p == "b" {
		other = "a"
	}
	var rest []ID
	for _, id := range c.order {
		if id != p && id != other {
			rest = append(rest, id)
		}
	}
	c.split([]ID{p, other}, rest)
	c.settle(time.Second)
	w := c.write(p)
	c.settle(500 * time.Millisecond)
	if _, acked := c.acked[w]; acked && c.nodes[p].r.Status().Role == Primary {
		t.Fatalf("%s committed with 2 of 4 voters", p)
	}
	c.heal()
	c.settle(2 * time.Second)
	final := c.write(c.primary())
	c.settle(time.Second)
	if _, ok := c.acked[final]; !ok {
		t.Fatal("no write after healing")
	}
	c.checkConverged()
}

// TestRemoveReplicaWhileWriting removes a secondary, then the primary
// (which hands over first); writes keep being acknowledged, the removed
// replicas learn they were removed, and the rest converge.
func TestRemoveReplicaWhileWriting(t *testing.T) {
	c := newCluster(t, 2, Level2, []int{3, 2, 1}, nil)
	c.settle(500 * time.Millisecond)
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	if err := c.change(Change{Remove: "c"}); err != nil {
		t.Fatalf("remove c: %v", err)
	}
	before := len(c.acked)
	if !c.until(2*time.Second, true, func() bool { return c.nodes["c"].r.Status().Removed }) {
		t.Fatalf("c never learned it was removed: %+v", c.nodes["c"].r.Status())
	}
	if len(c.acked) == before {
		t.Fatal("no write acknowledged while c was removed")
	}
	if err := c.change(Change{Remove: "c"}); err != nil {
		t.Fatalf("removing a non-member should be a no-op: %v", err)
	}
	// The primary leaves: it hands over to b first.
	var err error
	if !c.until(time.Second, true, func() bool {
		err = c.change(Change{Remove: "a"})
		return !errors.Is(err, ErrChangeInFlight)
	}) || err != nil {
		t.Fatalf("remove a: %v", err)
	}
	if !c.until(3*time.Second, true, func() bool { return c.nodes["a"].r.Status().Removed && c.primary() == "b" }) {
		t.Fatalf("a not removed: a %+v, b %+v", c.nodes["a"].r.Status(), c.nodes["b"].r.Status())
	}
	before = len(c.acked)
	c.until(500*time.Millisecond, true, func() bool { return false })
	if len(c.acked) == before {
		t.Fatal("b alone acknowledges nothing")
	}
	if got := c.nodes["b"].r.Status().Members; !slices.Equal(ids(got), []ID{"b"}) {
		t.Fatalf("b's replica set %v", got)
	}
	// A removed replica neither campaigns nor is heard.
	c.crash("b")
	c.settle(2 * time.Second)
	for _, id := range []ID{"a", "c"} {
		if s := c.nodes[id].r.Status(); s.Role == Primary {
			t.Fatalf("removed %s became primary", id)
		}
	}
	c.start(c.nodes["b"])
	c.settle(time.Second)
	if c.primary() != "b" {
		t.Fatalf("b did not come back as the primary of its own set: %+v", c.nodes["b"].r.Status())
	}
	c.members = []ID{"b"}
	c.checkConverged()
}

// TestReplicaSetSurvivesRestarts stores the replica set: after an add
// and a remove, every replica restarts (the added one included, from its
// own data) and the partition runs on the changed set.
func TestReplicaSetSurvivesRestarts(t *testing.T) {
	c := newCluster(t, 3, Level2, []int{3, 2, 1}, nil)
	c.settle(500 * time.Millisecond)
	c.joiner("d")
	if err := c.change(Change{Add: "d", Priority: 4}); err != nil {
		t.Fatal(err)
	}
	if !c.until(3*time.Second, true, func() bool { s := c.committedSet(); return s != nil && isVoterIn(s, "d") }) {
		t.Fatal("d not added")
	}
	var err error
	c.until(time.Second, true, func() bool { err = c.change(Change{Remove: "c"}); return !errors.Is(err, ErrChangeInFlight) })
	if err != nil {
		t.Fatal(err)
	}
	if !c.until(3*time.Second, true, func() bool { return c.nodes["c"].r.Status().Removed }) {
		t.Fatal("c not removed")
	}
	c.settle(time.Second)
	for _, id := range []ID{"a", "b", "c", "d"} {
		c.crash(id)
	}
	for _, id := range []ID{"a", "b", "c", "d"} {
		c.start(c.nodes[id])
	}
	if !c.nodes["c"].r.Status().Removed {
		t.Fatalf("c forgot its removal: %+v", c.nodes["c"].r.Status())
	}
	c.settle(2 * time.Second)
	// d has the highest priority: it leads once it executed everything.
	if c.primary() != "d" {
		t.Fatalf("primary %q after restart, want d", c.primary())
	}
	w := c.write("d")
	c.settle(time.Second)
	if _, ok := c.acked[w]; !ok {
		t.Fatal("no write after the restart")
	}
	for _, id := range []ID{"a", "b", "d"} {
		if got := ids(c.nodes[id].r.Status().Members); !slices.Equal(got, []ID{"a", "b", "d"}) {
			t.Fatalf("%s's replica set after restart: %v", id, got)
		}
	}
	c.members = []ID{"a", "b", "d"}
	c.checkConverged()
}

// TestChangeRefusals: a follower redirects, one change at a time, a
// fixed MinLive keeps the set static, and a removal that leaves no live
// majority is refused.
func TestChangeRefusals(t *testing.T) {
	c := newCluster(t, 4, Level2, []int{3, 2, 1}, nil)
	c.settle(500 * time.Millisecond)
	var np *NotPrimaryError
	if err := c.nodes["b"].r.ChangeMembers(c.now, Change{Add: "d"}); !errors.As(err, &np) || np.Primary != "a" {
		t.Fatalf("at a secondary: %v", err)
	}
	c.joiner("d")
	if err := c.change(Change{Add: "d"}); err != nil {
		t.Fatal(err)
	}
	if err := c.change(Change{Remove: "c"}); !errors.Is(err, ErrChangeInFlight) {
		t.Fatalf("second change while one is in flight: %v", err)
	}
	c.settle(2 * time.Second)
	c.crash("c")
	c.settle(time.Second)
	// a, b, d live of 4: removing b leaves a and d of {a, c, d}: 2 of 3.
	if err := c.change(Change{Remove: "b"}); err != nil {
		t.Fatalf("remove b: %v", err)
	}
	c.settle(time.Second)
	// a, d live of {a, c, d}: removing d leaves a alone of {a, c}.
	if err := c.change(Change{Remove: "d"}); !errors.Is(err, ErrChangeRefused) {
		t.Fatalf("removal leaving no live majority: %v", err)
	}
	f := newCluster(t, 5, Level2, []int{3, 2, 1}, func(cfg *Config) { cfg.MinLive = 2 })
	f.settle(500 * time.Millisecond)
	if err := f.change(Change{Remove: "c"}); !errors.Is(err, ErrChangeRefused) {
		t.Fatalf("with a fixed MinLive: %v", err)
	}
}

// TestMembershipChangesUnderFaults runs the randomized schedules (loss,
// duplicates, delays, crashes and restarts, failovers) with a replica
// added and another removed while they run, then heals and checks the
// usual invariants on the final replica set: one primary per epoch,
// never two leases at once, nothing executed twice or differently, no
// acknowledged write lost, converged state.
func TestMembershipChangesUnderFaults(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 5
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			level := Level2
			if seed%2 == 1 {
				level = Level3
			}
			c := newCluster(t, 100+seed, level, []int{3, 2, 1}, nil)
			if seed%3 == 2 {
				c.dup, c.delay = 0.05, 30*time.Millisecond
			}
			// A running partition (a fresh one's first election under
			// loss is the randomized schedules' business).
			c.settle(300 * time.Millisecond)
			c.write(c.primary())
			c.settle(100 * time.Millisecond)
			c.joiner("d")
			remove := c.order[c.rng.IntN(3)]
			added, removed := false, false
			c.drop = 0.1
			for i := range 3000 {
				switch {
				case i > 100 && !added && i%5 == 0:
					added = c.change(Change{Add: "d", Priority: 2}) == nil
				case added && !removed && i > 800 && i%5 == 0:
					removed = c.change(Change{Remove: remove}) == nil
				}
				switch x := c.rng.IntN(100); {
				case x < 45 && len(c.snaps) > 0 && c.rng.IntN(8) == 0:
					c.deliverSnap(c.rng.IntN(len(c.snaps)))
				case x < 45 && len(c.net) > 0:
					c.deliver(c.rng.IntN(len(c.net)))
				case x < 70:
					c.tick(time.Duration(5+c.rng.IntN(20)) * time.Millisecond)
				case x < 93:
					if p := c.primary(); p != "" {
						c.write(p)
					}
				case x < 95:
					if up := c.up(); len(up) > 2 {
						c.crash(up[c.rng.IntN(len(up))])
					}
				default:
					for _, id := range c.order {
						if n := c.nodes[id]; n.r == nil && !n.joinable {
							c.start(n)
							break
						}
					}
				}
			}
			for _, id := range c.order {
				if n := c.nodes[id]; n.r == nil && !n.joinable {
					c.start(n)
				}
			}
			c.drop, c.dup, c.delay = 0, 0, 0
			c.settle(3 * time.Second)
			// Finish the changes the schedule left undone.
			var err error
			for _, ch := range []Change{{Add: "d", Priority: 2}, {Remove: remove}} {
				c.until(5*time.Second, true, func() bool {
					err = c.change(ch)
					if err != nil {
						return false
					}
					set := c.committedSet()
					return set != nil && (ch.Add == "" || isVoterIn(set, ch.Add)) && (ch.Remove == "" || !hasMember(set, ch.Remove))
				})
				if err != nil {
					t.Fatalf("%+v: %v", ch, err)
				}
			}
			set := c.committedSet()
			if set == nil || !isVoterIn(set, "d") || hasMember(set, remove) {
				for _, id := range c.order {
					if r := c.nodes[id].r; r != nil {
						t.Logf("%s: %+v confLog %v committed %v", id, r.Status(), r.confLog, r.committed)
						if r.role == Primary {
							for p, pr := range r.progress {
								t.Logf("  progress %s: %+v alive %v", p, *pr, r.alive[p])
							}
						}
					}
				}
				t.Fatalf("final replica set %v (removing %s)", set, remove)
			}
			c.members = ids(set)
			final := c.write(c.primary())
			c.settle(time.Second)
			if _, ok := c.acked[final]; !ok {
				t.Fatalf("write after healing not acknowledged: %v", c.failed[final])
			}
			c.checkConverged()
			t.Logf("acked %d, epochs %d, set %v (removed %s), snapshots %d; during the faults: added %v, removed %v",
				len(c.acked), len(c.primaries), c.members, remove, c.installed, added, removed)
		})
	}
}

// TestChangeExpectsReplicaSet: a change planned against a replica set
// that is no longer the partition's (a stale view, or another planner's
// change first) is refused and logs nothing; one that names the current
// set, in any order, goes through.
func TestChangeExpectsReplicaSet(t *testing.T) {
	c := newCluster(t, 1, Level2, []int{3, 2, 1}, nil)
	c.settle(500 * time.Millisecond)
	c.joiner("d")
	c.joiner("e")
	last := c.nodes[c.primary()].r.last()
	if err := c.change(Change{Add: "d", Expect: []ID{"a", "b"}}); !errors.Is(err, ErrChangeRefused) {
		t.Fatalf("add against a stale set: %v, want ErrChangeRefused", err)
	}
	if got := c.nodes[c.primary()].r.last(); got != last {
		t.Fatalf("a refused change logged entries: last %d, was %d", got, last)
	}
	if err := c.change(Change{Add: "d", Expect: []ID{"c", "a", "b"}}); err != nil {
		t.Fatalf("add against the current set: %v", err)
	}
	if !c.until(5*time.Second, false, func() bool { s := c.committedSet(); return s != nil && isVoterIn(s, "d") }) {
		t.Fatal("d never became a voter")
	}
	// A second planner that saw {a,b,c} too must not add e on top.
	if err := c.change(Change{Add: "e", Expect: []ID{"a", "b", "c"}}); !errors.Is(err, ErrChangeRefused) {
		t.Fatalf("second add against the old set: %v, want ErrChangeRefused", err)
	}
	if err := c.change(Change{Remove: "c", Expect: []ID{"a", "b", "c", "d"}}); err != nil {
		t.Fatalf("remove against the current set: %v", err)
	}
}

// TestSetPriorityMovesThePrimary: raising a secondary's priority above
// the primary's, through the log, hands the primary role to it, and a
// later election keeps it there.
func TestSetPriorityMovesThePrimary(t *testing.T) {
	c := newCluster(t, 1, Level2, []int{3, 2, 1}, nil)
	c.settle(500 * time.Millisecond)
	if p := c.primary(); p != "a" {
		t.Fatalf("primary %q, want a (the highest priority)", p)
	}
	if err := c.change(Change{Add: "x", Priority: 9, SetPriority: true}); !errors.Is(err, ErrChangeRefused) {
		t.Fatalf("priority of a non-member: %v, want ErrChangeRefused", err)
	}
	if err := c.change(Change{Add: "c", Priority: 4, SetPriority: true, Expect: []ID{"a", "b", "c"}}); err != nil {
		t.Fatalf("set priority: %v", err)
	}
	if !c.until(5*time.Second, true, func() bool { return c.primary() == "c" }) {
		t.Fatalf("primary %q after c's priority rose above a's, want c", c.primary())
	}
	c.settle(time.Second)
	c.checkConverged()
	c.checkAnswered()
	set := c.committedSet()
	if i := slices.IndexFunc(set, func(p Peer) bool { return p.ID == "c" }); i < 0 || set[i].Priority != 4 {
		t.Fatalf("committed set %+v: c's priority not 4", set)
	}
}
