package replication

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// TestReplicaRemovedAndAddedBackAtOnce: b is removed and added again
// right away (a move back and forth), while writes flow.
func TestReplicaRemovedAndAddedBackAtOnce(t *testing.T) {
	c := newMemCluster(t)
	c.advance(time.Second)
	c.write(0, 20, 100)
	next := 20
	if out := c.change(replica.Change{Remove: "b"}, &next); !out.Done {
		t.Fatalf("remove b: %+v", out)
	}
	if out := c.change(replica.Change{Add: "b", Priority: 2}, &next); !out.Done {
		t.Fatalf("add b: %+v", out)
	}
	c.advance(500 * time.Millisecond)
	if got, want := c.stores["b"].Digest(), c.stores["a"].Digest(); got != want {
		t.Fatalf("b: %s, a: %s", got, want)
	}
}
