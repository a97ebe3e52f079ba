package replica

import (
	"slices"
	"testing"
	"time"
)

// wipe crashes id and restarts it with no durable state and an empty
// service: its data directory was lost.
func (c *cluster) wipe(id ID) {
	c.t.Helper()
	c.crash(id)
	n := c.nodes[id]
	n.disk = disk{}
	n.svc = service{seen: map[string]bool{}}
	n.nApp = 0
	c.start(n)
}

// neverPrimary settles for d in 10 ms steps, failing if id is ever primary.
func (c *cluster) neverPrimary(id ID, d time.Duration) {
	c.t.Helper()
	for end := c.now.Add(d); c.now.Before(end); {
		c.tick(10 * time.Millisecond)
		c.flush()
		if r := c.nodes[id].r; r != nil && r.Status().Role == Primary {
			// (After a snapshot it holds the data, and leading is fine.)
			for req := range c.acked {
				if !c.holds(id, req) {
					c.t.Fatalf("%s became primary at epoch %d without acknowledged write %d (%d ops executed)",
						id, r.Status().Epoch, req, len(c.nodes[id].svc.ops))
				}
			}
		}
	}
}

// The loss: the highest-priority replica comes back without data
// while the primary is down. It must not win an election on empty state
// (which would overwrite acknowledged writes), and the replica with data
// must not wait for it forever: it does not count as a voter either, so
// with fewer than MinLive replicas holding data nobody is elected until
// one returns (or the operator promotes), and then the empty one catches
// up from that primary.
func TestWipedReplicaNeverLeadsOnEmptyState(t *testing.T) {
	c := newCluster(t, 4, Level2, []int{3, 2, 1}, func(cfg *Config) { cfg.MaxBatch = 64 })
	c.settle(time.Second)
	for range 5 {
		c.write("a")
	}
	c.flush()
	c.crash("a")
	c.crash("b")
	c.wipe("a")
	c.neverPrimary("a", 2*time.Second)
	if p := c.primary(); p != "" {
		t.Fatalf("primary %q elected with only c holding data (MinLive 2)", p)
	}
	c.start(c.nodes["b"])
	c.neverPrimary("a", 3*time.Second)
	if p := c.primary(); p == "" {
		t.Fatal("no primary after b returned")
	}
	for id := range c.acked {
		if !c.has(c.primary(), id) {
			t.Fatalf("acknowledged write %d lost on the new primary %s", id, c.primary())
		}
	}
	c.write(c.primary())
	c.settle(time.Second)
	c.checkAnswered()
}

// With MinLive 1 a replica with data elects itself at once; the empty
// higher-priority one does not hold it back (it would refuse it a vote).
func TestEmptyHigherPriorityPeerDoesNotBlockElection(t *testing.T) {
	c := newCluster(t, 5, Level2, []int{3, 2, 1}, func(cfg *Config) { cfg.MaxBatch = 64; cfg.MinLive = 1 })
	c.holdSnaps = true // (a snapshot would restore a's data, and a would lead again)
	c.settle(time.Second)
	for range 3 {
		c.write("a")
	}
	c.flush()
	c.crash("a")
	c.crash("b")
	c.wipe("a")
	c.neverPrimary("a", 2*time.Second)
	if p := c.primary(); p != "c" {
		t.Fatalf("primary = %q, want c (the only replica with data)", p)
	}
	w := c.write("c")
	c.settle(time.Second)
	if _, ok := c.acked[w]; !ok {
		t.Fatal("write not acknowledged by c")
	}
	if got := c.nodes["a"].svc.ops; len(got) != 0 && !slices.Equal(got, c.nodes["c"].svc.ops) {
		t.Fatalf("a executed %v, c %v", got, c.nodes["c"].svc.ops)
	}
}

// A brand-new partition (every replica empty) still elects a primary.
func TestAllEmptyReplicasStillElect(t *testing.T) {
	c := newCluster(t, 6, Level3, []int{1, 2, 3}, nil)
	c.settle(time.Second)
	if p := c.primary(); p != "c" {
		t.Fatalf("primary = %q, want c", p)
	}
}
