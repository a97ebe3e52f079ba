package replica

import (
	"fmt"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica/check"
)

// TestLevel3History runs clients against a level-3 partition the way the
// node's client module would: replicas publish Status every publish period
// (so clients see it late), a read goes to a random replica whose published
// version passes MayServe, else to the primary, and every call's version
// goes into the client's Session. The recorded history must satisfy the
// checker's session guarantees and the staleness bound with eps = the
// publish period plus one delivery step.
func TestLevel3History(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			// The random delivery below delays messages by up to a few
			// hundred ms: a lease must outlast the round trip.
			c := newCluster(t, seed, Level3, []int{3, 2, 1}, func(cfg *Config) { cfg.Lease = time.Second; cfg.AckTimeout = time.Second })
			c.settle(time.Second)
			const publish = 20 * time.Millisecond
			published := map[ID]Status{}
			var lastPublish time.Time
			var timeline check.Timeline
			var ops []check.Op
			sessions := map[string]*Session{}
			type call struct {
				session string
				start   time.Time
			}
			calls := map[uint64]call{}
			seenReply := map[uint64]bool{}
			refused := 0
			for range 3000 {
				if c.primary() == "" {
					// (no commits without a primary)
				} else if s := c.nodes[c.primary()].r.Status(); len(timeline) == 0 || uint64(s.Commit) > timeline[len(timeline)-1].Version {
					timeline = append(timeline, check.Point{At: c.now, Version: uint64(s.Commit)})
				}
				if c.now.Sub(lastPublish) >= publish {
					lastPublish = c.now
					for _, id := range c.order {
						published[id] = c.nodes[id].r.Status()
					}
				}
				for req, lsn := range c.acked { // writes acknowledged since the last step
					if cl, ok := calls[req]; ok && !seenReply[req] {
						seenReply[req] = true
						sessions[cl.session].Observe("p", lsn)
						ops = append(ops, check.Op{Session: cl.session, Kind: check.Write, Partition: "p",
							Version: uint64(lsn), Start: cl.start, End: c.now})
					}
				}
				sess := fmt.Sprint("s", c.rng.IntN(4))
				if sessions[sess] == nil {
					sessions[sess] = &Session{}
				}
				switch x := c.rng.IntN(100); {
				case x < 50 && len(c.net) > 0:
					c.deliver(c.rng.IntN(len(c.net)))
				case x < 65:
					c.tick(5 * time.Millisecond)
				case x < 75:
					if c.primary() == "" {
						break // a client finds no primary and retries later
					}
					req := c.write(c.primary())
					calls[req] = call{session: sess, start: c.now}
				default:
					// A primary is trusted for freshness only while it
					// holds its lease; without one nobody is fresh.
					leased := func(s Status) bool { return c.now.Before(s.LeaseUntil) }
					var prim Status
					for _, s := range published {
						if s.Role == Primary && s.Epoch >= prim.Epoch {
							prim = s
						}
					}
					var fresh []ID
					for _, id := range c.order {
						s := published[id]
						if leased(prim) && s.Role != Recovering && MayServe(s.Applied, prim.VersionAgo, sessions[sess].Min("p")) {
							fresh = append(fresh, id)
						}
					}
					at := ID("")
					if len(fresh) > 0 {
						at = fresh[c.rng.IntN(len(fresh))]
					} else if p := c.primary(); p != "" {
						if s := c.nodes[p].r.Status(); leased(s) && MayServe(s.Applied, s.VersionAgo, sessions[sess].Min("p")) {
							at = p
						}
					}
					if at == "" {
						refused++
						break // not served: the client retries
					}
					v := c.nodes[at].r.Status().Applied
					sessions[sess].Observe("p", v)
					ops = append(ops, check.Op{Session: sess, Kind: check.Read, Partition: "p",
						Version: uint64(v), Start: c.now, End: c.now})
				}
			}
			reads := 0
			for _, op := range ops {
				if op.Kind == check.Read {
					reads++
				}
			}
			t.Logf("%d reads served, %d refused for want of a leased primary", reads, refused)
			if reads < 10*refused {
				t.Fatalf("%d reads served, %d refused: leases lapse too often", reads, refused)
			}
			if vs := check.Sessions(ops); len(vs) > 0 {
				t.Fatalf("%d session violations, first: %v", len(vs), vs[0])
			}
			x := c.cfg.Staleness
			if vs := check.Staleness(ops, map[string]check.Timeline{"p": timeline}, x, publish+5*time.Millisecond); len(vs) > 0 {
				t.Fatalf("%d staleness violations, first: %v", len(vs), vs[0])
			}
			// The bound must bind: without the publish slack or with a tighter
			// x some reads would have been too stale.
			if vs := check.Staleness(ops, map[string]check.Timeline{"p": timeline}, 0, 0); len(vs) == 0 {
				t.Fatal("no read was ever stale at x=0: the test does not exercise staleness")
			}
		})
	}
}
