package replica

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// holds reports whether replica id executed or logged write req.
func (c *cluster) holds(id ID, req uint64) bool {
	if c.has(id, req) {
		return true
	}
	for _, e := range c.nodes[id].r.log {
		if string(e.Body) == c.prop[req] {
			return true
		}
	}
	return false
}

// allServing reports whether every replica is up and serving.
func (c *cluster) allServing() bool {
	for _, id := range c.order {
		r := c.nodes[id].r
		if r == nil || r.phase != PhaseServing || c.isPaused(id) {
			return false
		}
	}
	return true
}

// A replica restarted without its data after the log it would need was
// truncated (issue 13's wiped data directory) catches up by a snapshot of
// the primary's service, then by the log after it, rejoins the live set,
// and after a restart resumes from the installed base.
func TestWipedReplicaCatchesUpBySnapshot(t *testing.T) {
	c := newCluster(t, 3, Level2, []int{3, 2, 1}, func(cfg *Config) { cfg.MaxBatch = 64 })
	c.settle(time.Second)
	for range 5 {
		c.write("a")
	}
	c.flush()
	c.crash("a")
	c.settle(time.Second)
	if p := c.primary(); p != "b" {
		t.Fatalf("primary after a crashed = %q, want b", p)
	}
	for range 3 {
		c.write("b")
	}
	c.settle(200 * time.Millisecond)
	if first := c.nodes["b"].r.first; first <= 1 {
		t.Fatalf("b's log starts at %d: not truncated, the test needs it truncated", first)
	}
	c.wipe("a")
	c.neverPrimary("a", 2*time.Second)
	if c.installed == 0 {
		t.Fatal("no snapshot installed")
	}
	w := c.write(c.primary())
	c.settle(time.Second)
	if _, ok := c.acked[w]; !ok {
		t.Fatal("write not acknowledged after the snapshot")
	}
	if s := c.nodes["a"].r.Status(); s.Phase != PhaseServing || s.Diverged {
		t.Fatalf("wiped a after the snapshot: %+v, want serving", s)
	}
	if live := c.nodes[c.primary()].r.Status().Live; !slices.Contains(live, "a") {
		t.Fatalf("a not back in the live set %v", live)
	}
	c.checkConverged()
	// The wal holds the new base: a restart resumes from it.
	c.crash("a")
	c.settle(time.Second)
	c.start(c.nodes["a"])
	c.settle(time.Second)
	for range 3 {
		c.write(c.primary())
	}
	c.settle(time.Second)
	c.checkConverged()
	c.checkAnswered()
}

// TestDivergedReplicaIsRepairedBySnapshot: after the forced promote of
// TestForcedPromoteDivergenceIsDetected, the diverged replica asks its
// primary for a snapshot, installs it (its service now holds the forced
// primary's state, the writes it alone had are gone, as the operator was
// warned), rejoins the live set and serves again.
func TestDivergedReplicaIsRepairedBySnapshot(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.split([]ID{"c"}, []ID{"a", "b"})
	for range 5 {
		c.write("a")
	}
	c.settle(500 * time.Millisecond)
	c.crash("a")
	c.crash("b")
	c.heal()
	// The forced primary's log replaces committed writes: the harness's
	// one-write-per-LSN record no longer holds across it.
	clear(c.canonical)
	c.nodes["c"].r.Promote(c.now, true)
	c.process(c.nodes["c"])
	w := c.write("c")
	c.holdSnaps = true
	c.start(c.nodes["b"])
	c.settle(500 * time.Millisecond)
	if s := c.nodes["b"].r.Status(); !s.Diverged {
		t.Fatalf("b after the forced promote: %+v, want diverged", s)
	}
	// The staleness checkers' record of commits restarts with the forced
	// primary's history too (b's commit point, from the lost one, no
	// longer counts now that b knows it diverged).
	c.commits = nil
	c.holdSnaps = false
	c.settle(time.Second)
	s := c.nodes["b"].r.Status()
	if s.Diverged || s.Phase != PhaseServing {
		t.Fatalf("b after the snapshot: %+v, want repaired and serving", s)
	}
	if live := c.nodes["c"].r.Status().Live; !slices.Contains(live, "b") {
		t.Fatalf("repaired b not in c's live set %v", live)
	}
	if _, ok := c.acked[w]; !ok {
		t.Fatal("c's write not acknowledged once b was repaired")
	}
	w2 := c.write("c")
	c.settle(time.Second)
	if _, ok := c.acked[w2]; !ok {
		t.Fatal("write after the repair not acknowledged")
	}
	if b, cc := strings.Join(c.nodes["b"].svc.ops, ","), strings.Join(c.nodes["c"].svc.ops, ","); b != cc {
		t.Fatalf("b and c differ after the repair:\nb %s\nc %s", b, cc)
	}
}

// TestSnapshotsUnderFaults runs the randomized schedules (message loss,
// reordering, crashes and restarts, failovers) with replicas' data wiped
// now and then, and snapshots delivered late, lost or out of order: no
// acknowledged write is lost, nothing is executed twice or differently,
// and the replicas converge.
func TestSnapshotsUnderFaults(t *testing.T) {
	seeds, steps := 12, 1500
	if testing.Short() {
		seeds, steps = 6, 800
	}
	installs := 0
	for _, level := range []Level{Level2, Level3} {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("L%d/seed%d", level, seed), func(t *testing.T) {
				c := newCluster(t, 100*uint64(level)+seed, level, []int{3, 2, 1}, func(cfg *Config) {
					cfg.SnapshotTimeout = 300 * time.Millisecond
				})
				c.wipes = 3
				runSchedule(c, level, steps)
				installs += c.installed
				t.Logf("acked %d, wipes left %d, snapshots installed %d", len(c.acked), c.wipes, c.installed)
			})
		}
	}
	if installs == 0 {
		t.Fatal("no schedule installed a snapshot")
	}
}

// TestTornLogTailCatchesUp: a secondary restarts having lost the tail of
// its log, entries it had acknowledged (the fault suite's torn write-log
// tail). The primary, told where its log ends, resends from there instead
// of waiting for entries it believes the secondary holds; the secondary
// serves again and every replica converges.
func TestTornLogTailCatchesUp(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	for range 12 {
		c.write("a")
		c.settle(20 * time.Millisecond)
	}
	c.settle(200 * time.Millisecond)
	c.crash("c")
	n := c.nodes["c"]
	if len(n.disk.log) == 0 {
		t.Fatal("c holds no log entry on disk: the test needs some to tear")
	}
	k := min(3, len(n.disk.log))
	lost := n.disk.log[len(n.disk.log)-k:]
	n.disk.log = n.disk.log[:len(n.disk.log)-k]
	n.disk.hs.Commit = min(n.disk.hs.Commit, lost[0].LSN-1)
	n.disk.applied = min(n.disk.applied, n.disk.hs.Commit)
	n.svc.lastLSN = min(n.svc.lastLSN, n.disk.applied)
	n.svc.ops = n.svc.ops[:min(len(n.svc.ops), int(n.disk.applied))]
	c.start(n)
	for range 4 {
		c.write("a")
		c.settle(20 * time.Millisecond)
	}
	c.settle(time.Second)
	if s := c.nodes["c"].r.Status(); s.Phase != PhaseServing || s.Applied != c.nodes["a"].r.Status().Applied {
		t.Fatalf("c after losing entries %d..%d: %+v, want serving at the primary's version %d",
			lost[0].LSN, lost[len(lost)-1].LSN, s, c.nodes["a"].r.Status().Applied)
	}
	c.checkConverged()
}
