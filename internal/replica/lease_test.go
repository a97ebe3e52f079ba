package replica

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// step advances the cluster by one 5 ms tick and delivers what is queued.
func (c *cluster) step() {
	c.tick(5 * time.Millisecond)
	c.flush()
}

// TestLeaseFollowsMajorityAnswers: the primary's lease runs from the Sent
// of the newest append a majority (itself included) answered, for
// Lease·(1−ClockDrift); one silent replica does not stop it, two do, and
// then the primary steps down once the lease lapses, with no lease or
// VersionAgo left to publish.
func TestLeaseFollowsMajorityAnswers(t *testing.T) {
	c := settled(t, Level3, []int{3, 2, 1})
	a := c.nodes["a"].r
	s := a.Status()
	if s.LeaseUntil.IsZero() || !c.now.Before(s.LeaseUntil) || s.LeaseUntil.After(c.now.Add(leaseFor(c.cfg.Lease))) {
		t.Fatalf("lease until %v at %v, want within (now, now+%v]", s.LeaseUntil, c.now, leaseFor(c.cfg.Lease))
	}
	c.split([]ID{"a", "b"}, []ID{"c"})
	for range 100 {
		c.step()
	}
	if s := a.Status(); s.Role != Primary || !c.now.Before(s.LeaseUntil) || s.VersionAgo == 0 {
		t.Fatalf("with b answering: %+v, want a leased primary", s)
	}
	c.heal()
	c.split([]ID{"a"}, []ID{"b", "c"})
	last := a.Status().LeaseUntil
	for a.Status().Role == Primary {
		if s := a.Status(); !s.LeaseUntil.Equal(last) {
			t.Fatalf("lease renewed to %v with no majority answering", s.LeaseUntil)
		}
		c.step()
	}
	// Check-quorum goes by when answers arrived, a round trip after the
	// sends the lease counts from, and over the full Lease: within
	// Lease·ClockDrift plus a tick of the lease's end.
	if slack := time.Duration(float64(c.cfg.Lease)*ClockDrift) + 5*time.Millisecond; c.now.Before(last) || c.now.After(last.Add(slack)) {
		t.Fatalf("stepped down at %v, lease until %v: want within %v after it", c.now, last, slack)
	}
	if s := a.Status(); !s.LeaseUntil.IsZero() || s.VersionAgo != 0 {
		t.Fatalf("after stepping down: %+v", s)
	}
}

// TestNewPrimaryHasNoLeaseUntilItsEpochCommits: a new primary's commit
// point may lag what its predecessor acknowledged, so it publishes no
// lease until the no-op of its own epoch commits.
func TestNewPrimaryHasNoLeaseUntilItsEpochCommits(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.write("a")
	c.flush()
	c.crash("a")
	b := c.nodes["b"].r
	for range 400 {
		c.tick(5 * time.Millisecond)
		for len(c.net) > 0 && b.Status().Role != Primary {
			c.deliver(0)
		}
		if b.Status().Role == Primary {
			break
		}
	}
	s := b.Status()
	if s.Role != Primary || s.Commit >= b.ownFrom {
		t.Fatalf("b: %+v, want a primary whose no-op (LSN %d) has not committed", s, b.ownFrom)
	}
	if !s.LeaseUntil.IsZero() {
		t.Fatalf("lease until %v before the primary's own epoch committed", s.LeaseUntil)
	}
	c.flush()
	if s := b.Status(); s.Commit < b.ownFrom || s.LeaseUntil.IsZero() {
		t.Fatalf("after c's answer: %+v, want a lease", s)
	}
}

// TestIsolatedPrimaryStepsDownBeforeAnotherIsElected: the cut-off
// primary. It stops being primary once its lease lapses; the majority
// side elects a new primary only after that lease lapsed, within
// lease + AckTimeout + an election; the cut-off node's epoch never moves
// and on healing it follows the new primary.
func TestIsolatedPrimaryStepsDownBeforeAnotherIsElected(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	a := c.nodes["a"].r
	c.split([]ID{"a"}, []ID{"b", "c"})
	cut := c.now
	leaseEnd := a.Status().LeaseUntil
	var down, elected time.Time
	for range 400 {
		c.write("a") // a client on a's side keeps writing
		c.step()
		if down.IsZero() && a.Status().Role != Primary {
			down = c.now
		}
		if p := c.primary(); elected.IsZero() && p != "" && p != "a" {
			elected = c.now
		}
	}
	if down.IsZero() || down.After(leaseEnd.Add(time.Duration(float64(c.cfg.Lease)*ClockDrift)+5*time.Millisecond)) {
		t.Fatalf("cut-off primary stepped down at %v, lease ended %v", down.Sub(cut), leaseEnd.Sub(cut))
	}
	if elected.IsZero() || elected.Before(leaseEnd) {
		t.Fatalf("new primary at %v, old lease until %v", elected.Sub(cut), leaseEnd.Sub(cut))
	}
	if d := elected.Sub(cut); d > c.cfg.Lease+c.cfg.AckTimeout+c.cfg.ElectionTimeout {
		t.Fatalf("majority side elected after %v", d)
	}
	if e := a.Status().Epoch; e != 1 {
		t.Fatalf("cut-off node's epoch %d, want 1 (unchanged)", e)
	}
	for req := range c.prop {
		if _, ok := c.acked[req]; ok && c.origin[req][0] == 0 && c.acked[req] > 0 && !c.has("b", req) {
			t.Fatalf("write %d acknowledged by the cut-off primary is not on the majority side", req)
		}
	}
	c.heal()
	c.settle(time.Second)
	// a, the preferred replica, gets the role back by a transfer once it
	// caught up: one epoch more, not an election it forced.
	if s := a.Status(); s.Role != Primary || s.Epoch != 3 {
		t.Fatalf("healed a: %+v, want primary in epoch 3 (by transfer)", s)
	}
	c.checkConverged()
	t.Logf("stepped down %v after the cut (lease %v), new primary after %v", down.Sub(cut), leaseEnd.Sub(cut), elected.Sub(cut))
}

// TestIsolatedReplicaNeverRaisesItsEpoch: the epoch inflation (6
// to 80). A replica cut off for many election timeouts only pre-votes,
// which changes no epoch anywhere, so when it returns it does not depose
// the healthy primary.
func TestIsolatedReplicaNeverRaisesItsEpoch(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.split([]ID{"c"}, []ID{"a", "b"})
	p, epoch := ID("a"), Epoch(1)
	for range 10 {
		c.write(p)
		c.settle(300 * time.Millisecond)
	}
	if e := c.nodes["c"].r.Status().Epoch; e != 1 {
		t.Fatalf("cut-off replica raised its epoch to %d", e)
	}
	c.heal()
	c.settle(100 * time.Millisecond)
	if s := c.nodes[p].r.Status(); s.Role != Primary || s.Epoch != epoch {
		t.Fatalf("the returning replica deposed %s: %+v", p, s)
	}
	c.checkConverged()
}

// twoLeases runs the false-suspicion scenario: the primary a is cut off,
// and the others' failure detectors wrongly report it dead at once (a
// one-off transport error). It reports how many instants the lease
// checker found two leased primaries. rates are the nodes' clock rates.
func twoLeases(t *testing.T, rates map[ID]float64) int {
	c := newCluster(t, 1, Level2, []int{3, 2, 1}, nil)
	c.rate = rates
	c.settle(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	c.fatalf = func(string, ...any) {}
	c.split([]ID{"a"}, []ID{"b", "c"})
	for _, id := range []ID{"b", "c"} {
		c.nodes[id].r.SetAlive("a", false)
	}
	for range 200 {
		c.step()
	}
	if p := c.primary(); p == "" || p == "a" {
		t.Fatalf("no new primary on the majority side (%q)", p)
	}
	return c.leaseFails
}

// TestVoterGraceKeepsLeasesDisjoint: with the voter grace, the majority
// side elects only after a's lease lapsed; with the grace turned off
// (a test-only knob), the lease checker catches two leased primaries.
func TestVoterGraceKeepsLeasesDisjoint(t *testing.T) {
	if n := twoLeases(t, map[ID]float64{}); n != 0 {
		t.Fatalf("%d instants with two leases", n)
	}
	noGrace = true
	defer func() { noGrace = false }()
	if n := twoLeases(t, map[ID]float64{}); n == 0 {
		t.Fatal("without the voter grace the checker found no two leases: it does not check")
	}
}

// TestLeasesHoldWithinTheClockDrift: the stated clock assumption is
// needed and enough. With the primary's clock 4% slow and the others' 4%
// fast (rates 8% apart, within ClockDrift) leases stay disjoint; with the
// primary's clock 25% slow they overlap.
func TestLeasesHoldWithinTheClockDrift(t *testing.T) {
	within := map[ID]float64{"a": 0.96, "b": 1.04, "c": 1.04}
	if n := twoLeases(t, within); n != 0 {
		t.Fatalf("rates within the drift: %d instants with two leases", n)
	}
	beyond := map[ID]float64{"a": 0.75, "b": 1, "c": 1}
	if n := twoLeases(t, beyond); n == 0 {
		t.Fatal("a primary clock 25% slow gave no overlapping leases: the checker misses clock rates")
	}
}

// TestTransferWaitsUntilThePreferredReplicaExecuted: the stale
// takeover (a preferred replica took the primary role at executed 1,179
// while 6,126 was committed). The restarted preferred replica a catches
// up, but while it reports executing less than is committed the primary
// hands nothing over; once it has executed everything, the primary
// transfers the role (no election by a): writes held meanwhile commit.
func TestTransferWaitsUntilThePreferredReplicaExecuted(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.crash("a")
	c.settle(time.Second)
	if c.primary() != "b" {
		t.Fatalf("primary %q, want b", c.primary())
	}
	for range 20 {
		c.write("b")
	}
	c.settle(100 * time.Millisecond)
	c.start(c.nodes["a"])
	lag := true // a's executor lags: its answers report nothing executed
	for range 200 {
		c.tick(5 * time.Millisecond)
		for j := c.deliverable(); j >= 0; j = c.deliverable() {
			if m := &c.net[j]; lag && m.From == "a" && m.Type == MsgAppendResp {
				m.Hint = 0
			}
			if c.net[j].Type == MsgTimeoutNow {
				t.Fatal("TimeoutNow sent to a replica that has not executed what is committed")
			}
			c.deliver(j)
		}
	}
	if c.primary() != "b" || c.nodes["a"].r.Status().Role != Secondary {
		t.Fatalf("primary %q, a %v: want b, and a in sync", c.primary(), c.nodes["a"].r.Status().Role)
	}
	lag = false
	var held []uint64
	sawTimeout := false
	for range 200 {
		c.tick(5 * time.Millisecond)
		for j := c.deliverable(); j >= 0; j = c.deliverable() {
			if c.net[j].Type == MsgTimeoutNow {
				sawTimeout = true
				held = append(held, c.write("b")) // arrives while b hands over
			}
			c.deliver(j)
		}
		if c.primary() == "a" {
			break
		}
	}
	s := c.nodes["a"].r.Status()
	if !sawTimeout || s.Role != Primary || s.Epoch != 3 {
		t.Fatalf("a: %+v (TimeoutNow seen %v), want primary in epoch 3 by transfer", s, sawTimeout)
	}
	c.settle(500 * time.Millisecond)
	for _, w := range held {
		if _, ok := c.acked[w]; !ok && !Retryable(c.failed[w]) {
			t.Fatalf("write %d held during the transfer: acked %v, failed %v", w, c.acked[w], c.failed[w])
		}
	}
	c.checkConverged()
}

// TestLostTimeoutNowResumes: a transfer whose TimeoutNow is lost ends
// after ElectionTimeout; the primary resumes, renews its lease and
// commits the writes it held back.
func TestLostTimeoutNowResumes(t *testing.T) {
	c := newCluster(t, 1, Level2, []int{2, 3, 1}, nil)
	c.crash("b")
	c.settle(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	c.start(c.nodes["b"])
	var w uint64
	lost := 0
	for range 100 {
		c.tick(5 * time.Millisecond)
		for j := c.deliverable(); j >= 0; j = c.deliverable() {
			if c.net[j].Type == MsgTimeoutNow && lost == 0 {
				c.net = slices.Delete(c.net, j, j+1)
				lost++
				w = c.write("a")
				if !c.nodes["a"].r.Status().LeaseUntil.IsZero() {
					t.Fatal("the primary kept its lease after sending TimeoutNow")
				}
				continue
			}
			c.deliver(j)
		}
	}
	if lost == 0 {
		t.Fatal("no transfer attempted")
	}
	if _, ok := c.acked[w]; !ok {
		t.Fatalf("write held during the failed transfer not acknowledged: %v", c.failed[w])
	}
	c.settle(2 * time.Second) // the next attempt succeeds
	if p := c.primary(); p != "b" {
		t.Fatalf("primary %q, want b after a second transfer", p)
	}
	c.checkConverged()
}

// TestPromoteNeedsMajorityUnlessForced: Promote without force is an
// election: with a healthy primary it changes nothing, with fewer than
// MinLive replicas it elects nobody; force promotes at once.
func TestPromoteNeedsMajorityUnlessForced(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.nodes["c"].r.Promote(c.now, false)
	c.process(c.nodes["c"])
	c.settle(time.Second)
	if p, e := c.primary(), c.nodes["a"].r.Status().Epoch; p != "a" || e != 1 {
		t.Fatalf("after promote(c) with a healthy primary: primary %q epoch %d", p, e)
	}
	c.crash("a")
	c.crash("b")
	c.nodes["c"].r.Promote(c.now, false)
	c.process(c.nodes["c"])
	c.settle(time.Second)
	if p := c.primary(); p != "" {
		t.Fatalf("promote without force elected %q with one replica of three", p)
	}
	if e := c.nodes["c"].r.Status().Epoch; e != 1 {
		t.Fatalf("a lone replica's promote raised its epoch to %d", e)
	}
	c.nodes["c"].r.Promote(c.now, true)
	c.process(c.nodes["c"])
	if p := c.primary(); p != "c" {
		t.Fatalf("forced promote: primary %q", p)
	}
}

// TestPromoteWithoutForceIgnoresPriority: the operator's choice wins
// over priority when a majority votes for it. Here b would not run (its
// membership still shows the higher-priority a alive), but it votes for
// c once a has been silent for AckTimeout.
func TestPromoteWithoutForceIgnoresPriority(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.write("a")
	c.flush()
	c.crash("a")
	c.nodes["b"].r.SetAlive("a", true)
	c.nodes["c"].r.Promote(c.now, false)
	c.process(c.nodes["c"])
	c.settle(time.Second)
	if p, e := c.primary(), c.nodes["c"].r.Status().Epoch; p != "c" || e != 2 {
		t.Fatalf("primary %q in epoch %d, want the promoted c in epoch 2 (and no transfer to b)", p, e)
	}
	c.checkConverged()
}

// TestForcedPromoteDivergenceIsDetected: the silent divergence. c
// is cut off while a and b commit writes; a and b fail and the operator
// forces c. When b returns, c's log differs from b's below b's commit
// point: b must not acknowledge it as held (it did, and `neptune status`
// showed every replica in sync) but report Diverged and serve nothing.
func TestForcedPromoteDivergenceIsDetected(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.split([]ID{"c"}, []ID{"a", "b"})
	for range 5 {
		c.write("a")
	}
	c.settle(500 * time.Millisecond) // c leaves the live set after AckTimeout
	if len(c.acked) != 5 {
		t.Fatalf("acked %d of 5", len(c.acked))
	}
	c.crash("a")
	c.crash("b")
	c.heal()
	c.nodes["c"].r.Promote(c.now, true)
	c.process(c.nodes["c"])
	c.write("c")
	c.holdSnaps = true // (TestDivergedReplicaIsRepairedBySnapshot lets it through)
	c.start(c.nodes["b"])
	c.settle(time.Second)
	s := c.nodes["b"].r.Status()
	if !s.Diverged || s.Role != Recovering {
		t.Fatalf("b after the forced promote: %+v, want diverged and recovering", s)
	}
	if live := c.nodes["c"].r.Status().Live; slices.Contains(live, "b") {
		t.Fatalf("diverged b counted in c's live set %v", live)
	}
}

// TestNewPrimaryFreshnessStartsAtTakeoverLast: the old primary committed
// a write and crashed before telling b; b's commit point lags it. As
// level-3 primary, b must publish the write's version as at least its
// version of x ago (its takeover last LSN), not its old commit point.
func TestNewPrimaryFreshnessStartsAtTakeoverLast(t *testing.T) {
	c := settled(t, Level3, []int{3, 2, 1})
	w := c.write("a")
	c.deliverTo(MsgAppend, "b")
	c.deliverTo(MsgAppend, "c")
	c.deliverTo(MsgAppendResp, "a") // a commits w and acknowledges it
	if _, ok := c.acked[w]; !ok {
		t.Fatal("w not acknowledged")
	}
	c.net = nil // the commit point never reaches b and c
	c.crash("a")
	b := c.nodes["b"].r
	if b.Status().Commit >= c.acked[w] {
		t.Fatal("b already knows w committed: the test needs its commit point to lag")
	}
	for range 200 {
		c.step()
		if s := b.Status(); s.Role == Primary && !s.LeaseUntil.IsZero() {
			if s.VersionAgo < c.acked[w] {
				t.Fatalf("new primary publishes VersionAgo %d below the acknowledged %d", s.VersionAgo, c.acked[w])
			}
			return
		}
	}
	t.Fatal("b never became a leased primary")
}

// TestRandomizedFaults drives clusters through seeded schedules with
// loss, duplicates, delays and reordering, crashes, cut-off primaries,
// majority/minority splits, bridges, pauses longer than the lease, and
// clock rates that differ by up to 8%. The checkers run at every step:
// one primary per epoch, never two leased primaries at one instant, a
// leased level-3 primary's VersionAgo never below what was committed x
// ago, no write executed twice or differently; after healing, every
// acknowledged write on every replica and identical state; and a node cut
// off alone never raises its epoch.
func TestRandomizedFaults(t *testing.T) {
	seeds, steps := 8, 1500
	if testing.Short() {
		seeds, steps = 3, 600
	}
	for _, level := range []Level{Level2, Level3} {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("L%d/seed%d", level, seed), func(t *testing.T) {
				prios := []int{3, 2, 1}
				if seed%2 == 1 {
					prios = []int{1, 5, 3, 2, 4}
				}
				c := newCluster(t, 100*uint64(level)+seed, level, prios, nil)
				for _, id := range c.order {
					c.rate[id] = 0.96 + 0.08*c.rng.Float64()
				}
				runFaults(c, level, steps)
				if c.freshSeen == 0 {
					t.Error("no secondary ever showed itself fresh: the freshness checker checked nothing")
				}
			})
		}
	}
}

// runFaults is runSchedule with the fault suite's nemeses.
func runFaults(c *cluster, level Level, steps int) {
	c.drop, c.dup, c.delay = 0.05, 0.05, 15*time.Millisecond
	var healAt time.Time
	alone := ID("") // a node cut off by itself, and its epoch then
	var aloneEpoch Epoch
	checkAlone := func() {
		if alone == "" {
			return
		}
		if r := c.nodes[alone].r; r != nil && r.Status().Epoch > aloneEpoch {
			c.fatalf("%s cut off alone raised its epoch from %d to %d", alone, aloneEpoch, r.Status().Epoch)
		}
		alone = ""
	}
	leased := 0
	for range steps {
		if p := c.primary(); p != "" && !c.nodes[p].r.leaseUntil().IsZero() {
			leased++
		}
		if !healAt.IsZero() && !c.now.Before(healAt) {
			checkAlone()
			c.heal()
			healAt = time.Time{}
		}
		switch x := c.rng.IntN(1000); {
		case x < 680:
			// Time passes and the network delivers what is due, in
			// random order: with the delay line's latency (up to 15 ms)
			// a round trip stays well within a lease, as on a real
			// network; the nemeses below are what breaks it.
			c.tick(time.Duration(1+c.rng.IntN(10)) * time.Millisecond)
			c.rng.Shuffle(len(c.net), func(i, j int) { c.net[i], c.net[j] = c.net[j], c.net[i] })
			c.flush()
		case x < 900:
			if p := c.primary(); p != "" && c.rng.IntN(10) < 8 {
				c.write(p)
			} else if up := c.up(); len(up) > 0 {
				c.write(up[c.rng.IntN(len(up))])
			}
		case x < 903:
			if up := c.up(); len(up) > 1 {
				c.crash(up[c.rng.IntN(len(up))])
			}
		case x < 913:
			for _, id := range c.order {
				if c.nodes[id].r == nil {
					c.start(c.nodes[id])
					break
				}
			}
		case x < 918 && healAt.IsZero():
			healAt = c.now.Add(time.Duration(100+c.rng.IntN(900)) * time.Millisecond)
			ids := slices.Clone(c.order)
			c.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			switch c.rng.IntN(3) {
			case 0: // cut off the primary (or anyone) alone
				p := c.primary()
				if p == "" {
					p = ids[0]
				}
				c.split([]ID{p}, slices.DeleteFunc(slices.Clone(c.order), func(id ID) bool { return id == p }))
				if r := c.nodes[p].r; r != nil {
					alone, aloneEpoch = p, r.Status().Epoch
				}
				if c.rng.IntN(2) == 0 {
					// A failed call makes the others' detectors report it
					// dead at once (the shell's rule (a)), not after
					// AckTimeout: only the voter grace protects its lease.
					for _, id := range c.up() {
						if id != p {
							c.nodes[id].r.SetAlive(p, false)
						}
					}
				}
			case 1: // majority / minority
				k := len(ids) / 2
				c.split(ids[:k], ids[k:])
			case 2: // a bridge: ids[0] reaches both sides, the sides not each other
				k := 1 + (len(ids)-1)/2
				c.split(ids[1:k], ids[k:])
			}
		case x < 921:
			if up := c.up(); len(up) > 0 {
				c.pause(up[c.rng.IntN(len(up))], c.cfg.Lease+time.Duration(c.rng.IntN(400))*time.Millisecond)
			}
		}
	}
	checkAlone()
	c.heal()
	clear(c.paused)
	for _, id := range c.order {
		if c.nodes[id].r == nil {
			c.start(c.nodes[id])
		}
	}
	c.drop, c.dup = 0, 0
	c.settle(3 * time.Second)
	final := c.write(c.up()[0])
	c.settle(time.Second)
	if _, ok := c.acked[final]; !ok {
		if c.primary() == "" {
			c.fatalf("no primary after healing")
		}
		final = c.write(c.primary())
		c.settle(time.Second)
	}
	if _, ok := c.acked[final]; !ok {
		c.fatalf("write after healing not acknowledged: %v", c.failed[final])
	}
	c.checkConverged()
	c.checkAnswered()
	c.t.Logf("acked %d, epochs %d, applied %d, steps with a leased primary %d of %d, %v simulated", len(c.acked), len(c.primaries), c.nodes["a"].svc.lastLSN, leased, steps, c.now.Sub(c.t0))
}

// TestFaultCheckersCanFail: the same schedules with the voter grace
// turned off (a test-only knob) must make the lease checker fire in some
// schedule; otherwise TestRandomizedFaults proves nothing about leases.
func TestFaultCheckersCanFail(t *testing.T) {
	noGrace = true
	defer func() { noGrace = false }()
	caught := 0
	for seed := range uint64(16) {
		func() {
			c := newCluster(t, 200+seed, Level2, []int{3, 2, 1}, nil)
			c.fatalf = func(format string, args ...any) { panic(violation(fmt.Sprintf(format, args...))) }
			defer func() {
				if v := recover(); v != nil {
					if _, ok := v.(violation); !ok {
						panic(v)
					}
					if c.leaseFails > 0 {
						caught++
					}
				}
			}()
			for _, id := range c.order {
				c.rate[id] = 0.96 + 0.08*c.rng.Float64()
			}
			runFaults(c, Level2, 1500)
		}()
	}
	t.Logf("without the voter grace, %d of 16 schedules had two leased primaries", caught)
	if caught == 0 {
		t.Fatal("the lease checker never fired without the voter grace")
	}
}

// TestPausedPrimaryResumesWithoutLease: the SIGSTOP/SIGCONT. The
// primary takes no input for longer than the lease; the others elect a
// new one. When it resumes with its old state it holds no valid lease (its
// clock moved on), and its first tick steps it down (check-quorum), before
// it hears of the new epoch: it never announces itself beside the new
// primary for seconds, as the issue saw.
func TestPausedPrimaryResumesWithoutLease(t *testing.T) {
	c := settled(t, Level3, []int{3, 2, 1})
	c.write("a")
	c.settle(50 * time.Millisecond)
	c.pause("a", 4*c.cfg.Lease)
	for range 120 {
		c.step()
	}
	p := c.primary()
	if p == "" || p == "a" {
		t.Fatalf("primary %q while a is paused", p)
	}
	c.step() // a resumes: the pause is over
	a := c.nodes["a"].r
	if s := a.Status(); s.Role == Primary {
		t.Fatalf("resumed a still primary: %+v", s)
	}
	c.settle(time.Second)
	c.checkConverged()
}

// TestSecondariesProveTheirFreshness: a secondary of a leased primary
// shows itself fresh (Status.FreshUntil) once it executed the commit point
// of an append that echoed its answer; cut off, its proof runs out after
// the staleness bound and is renewed only by the next leased primary.
func TestSecondariesProveTheirFreshness(t *testing.T) {
	c := settled(t, Level3, []int{3, 2, 1})
	for range 5 {
		c.write("a")
		c.settle(30 * time.Millisecond)
	}
	c.settle(100 * time.Millisecond)
	for _, id := range []ID{"b", "c"} {
		st := c.nodes[id].r.Status()
		if !c.local(id, c.now).Before(st.FreshUntil) || st.Applied != c.nodes["a"].r.commit {
			t.Fatalf("%s: FreshUntil %v at version %d (primary's commit %d): want fresh", id,
				st.FreshUntil.Sub(c.t0), st.Applied, c.nodes["a"].r.commit)
		}
	}
	// c alone: its proof lapses within the bound and is not renewed.
	c.split([]ID{"c"}, []ID{"a", "b"})
	for range 5 {
		c.write("a")
		c.settle(40 * time.Millisecond)
	}
	if st := c.nodes["c"].r.Status(); c.local("c", c.now).Before(st.FreshUntil) {
		t.Fatalf("c cut off for 200 ms still fresh until %v (now %v)", st.FreshUntil.Sub(c.t0), c.now.Sub(c.t0))
	}
	if st := c.nodes["b"].r.Status(); !c.local("b", c.now).Before(st.FreshUntil) {
		t.Fatal("b, still with the primary, lost its freshness")
	}
	c.heal()
	c.settle(200 * time.Millisecond)
	if st := c.nodes["c"].r.Status(); !c.local("c", c.now).Before(st.FreshUntil) || st.Applied != c.nodes["a"].r.commit {
		t.Fatalf("c healed: FreshUntil %v version %d, want fresh at %d", st.FreshUntil.Sub(c.t0), st.Applied, c.nodes["a"].r.commit)
	}
}

// TestFreshnessCheckerCanFail: the harness's checker catches a secondary
// that claims freshness while it lags the commits of more than x ago.
func TestFreshnessCheckerCanFail(t *testing.T) {
	c := settled(t, Level3, []int{3, 2, 1})
	c.split([]ID{"c"}, []ID{"a", "b"})
	for range 6 {
		c.write("a")
		c.settle(40 * time.Millisecond)
	}
	c.settle(300 * time.Millisecond) // c left the live set: a and b commit
	caught := 0
	c.fatalf = func(string, ...any) { caught++ }
	c.nodes["c"].r.freshAt = c.local("c", c.now) // a false proof
	c.checkLeases()
	if caught == 0 {
		t.Fatal("a lagging secondary claiming freshness went unnoticed")
	}
}

// TestPrimaryStoppedMidTransferStepsDownOnWaking: a primary stopped
// (SIGSTOP) just after sending TimeoutNow, for longer than the lease, ends
// the transfer when it wakes; check-quorum must then count from when the
// transfer was due, not from the waking, or the deposed primary keeps
// claiming its role for another lease (seen in the fault suite as a
// partition announcing two primaries after a pause).
func TestPrimaryStoppedMidTransferStepsDownOnWaking(t *testing.T) {
	c := newCluster(t, 1, Level2, []int{2, 3, 1}, nil)
	c.crash("b")
	c.settle(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	c.start(c.nodes["b"])
	sent := false
	for i := 0; i < 400 && !sent; i++ {
		c.tick(5 * time.Millisecond)
		for j := c.deliverable(); j >= 0; j = c.deliverable() {
			if c.net[j].Type == MsgTimeoutNow {
				c.net = slices.Delete(c.net, j, j+1) // lost, and a stops now
				sent = true
				break
			}
			c.deliver(j)
		}
	}
	if !sent {
		t.Fatal("no transfer attempted")
	}
	c.pause("a", 3*time.Second)
	c.settle(2900 * time.Millisecond)
	c.now = c.now.Add(200 * time.Millisecond)
	a := c.nodes["a"]
	a.r.Tick(c.local("a", c.now)) // its first tick awake, before any message reaches it
	a.r.Tick(c.local("a", c.now.Add(10*time.Millisecond)))
	if s := a.r.Status(); s.Role == Primary {
		t.Fatalf("a woke 3 s after its transfer and still claims the primary role (epoch %d): check-quorum restarted at the waking", s.Epoch)
	}
}
