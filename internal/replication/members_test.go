package replication

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// change runs ChangeReplicas at the primary's node while the clock
// advances, writing between steps, and returns its reply.
func (c *memCluster) change(ch replica.Change, next *int) *pb.ChangeReplicasReply {
	c.t.Helper()
	rt := c.net.rt(c.primary())
	type result struct {
		out *pb.ChangeReplicasReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := rt.ChangeReplicas(context.Background(), "kv", 0, ch)
		done <- result{out, err}
	}()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		select {
		case r := <-done:
			if r.err != nil {
				c.t.Fatalf("%+v: %v", ch, r.err)
			}
			return r.out
		default:
		}
		if c.primary() != "" {
			c.write(*next, 1, 100) // writes keep flowing during the change
			*next++
		}
		c.advance(tickEvery)
	}
	c.t.Fatalf("%+v: no answer", ch)
	return nil
}

func (c *memCluster) hosts(id string) bool { return slices.Contains(c.net.rt(id).Hosting("kv"), 0) }

// TestReplicaAddedAndRemovedOnNodes: node d hosts kv but no replica of
// partition 0; adding it makes its node create the replica when the
// primary's append names it, it catches up (from the log) and is promoted
// while writes flow; removing b makes b's node drop its replica; after
// restarts d hosts its replica from its stored replica set and b none.
func TestReplicaAddedAndRemovedOnNodes(t *testing.T) {
	c := newMemCluster(t)
	c.advance(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	c.write(0, 20, 1000)
	c.addNode("d")
	c.advance(100 * time.Millisecond)
	if c.hosts("d") {
		t.Fatal("d hosts partition 0 before it was added")
	}
	next := 20
	out := c.change(replica.Change{Add: "d", Priority: 1}, &next)
	if !out.Done || !c.hosts("d") {
		t.Fatalf("add d: %+v, d hosts it: %v", out, c.hosts("d"))
	}
	c.advance(200 * time.Millisecond) // (the primary counts it in its live set at its next answer)
	if st := c.part("d").status.Load(); st.Role != replica.Secondary || len(st.Members) != 4 || st.Members[3].Learner {
		t.Fatalf("d after the add: %+v", st)
	}
	out = c.change(replica.Change{Remove: "b"}, &next)
	if !out.Done || slices.ContainsFunc(out.Members, func(m *pb.ReplicaPeer) bool { return m.Id == "b" }) {
		t.Fatalf("remove b: %+v", out)
	}
	c.advance(time.Second)
	if c.hosts("b") {
		t.Fatal("b still hosts its removed replica")
	}
	c.write(next, 10, 100)
	c.advance(500 * time.Millisecond)
	want := c.stores["a"].Digest()
	for _, id := range []string{"c", "d"} {
		if got := c.stores[id].Digest(); got != want {
			t.Fatalf("%s: %s, primary a: %s", id, got, want)
		}
	}
	c.stop("d")
	c.stop("b")
	c.start("d")
	c.start("b")
	c.advance(time.Second)
	if !c.hosts("d") || c.hosts("b") {
		t.Fatalf("after restarts: d hosts %v, b hosts %v", c.hosts("d"), c.hosts("b"))
	}
	c.write(next+10, 5, 100)
	c.advance(500 * time.Millisecond)
	if got, want := c.stores["d"].Digest(), c.stores["a"].Digest(); got != want {
		t.Fatalf("d after restart: %s, a: %s", got, want)
	}
	// b comes back, with the data it kept.
	next += 15
	if out := c.change(replica.Change{Add: "b", Priority: 2}, &next); !out.Done || !c.hosts("b") {
		t.Fatalf("add b again: %+v, b hosts it: %v", out, c.hosts("b"))
	}
	c.advance(500 * time.Millisecond)
	if got, want := c.stores["b"].Digest(), c.stores["a"].Digest(); got != want {
		t.Fatalf("b added again: %s, a: %s", got, want)
	}
}
