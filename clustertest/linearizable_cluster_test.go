package clustertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestReplicationLinearizableReadsSeeEveryAcknowledgedWrite: a
// Linearizable kv service (YAML `replication.linearizable: true`) on three
// node processes. One client writes a new key; as soon as the write is
// acknowledged another client, with no session tying it to the first,
// reads it: a linearizable read sees every write acknowledged before it
// began, so it must find the key. Midway the primary is SIGKILLed and
// restarted; reads that cannot be served meanwhile fail retryably (never
// stale) and are retried.
func TestReplicationLinearizableReadsSeeEveryAcknowledgedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, nodes, w := appProcs(t, ctx, "z", "kv", 1, 2, "      linearizable: true\n")
	r, err := neptune.Dial(ctx, neptune.ClientConfig{Security: cl.ClientSecurity("client/client"), Join: cl.Seeds(), AnnounceTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitFor(t, 10*time.Second, func() bool {
		for _, pi := range r.Partitions() {
			for _, ri := range pi.Replicas {
				if pi.Linearizable && ri.Role == "primary" && ri.Lease > 0 {
					return true
				}
			}
		}
		return false
	})

	const n = 300
	retried := 0
	for i := range n {
		if i == n/3 {
			primary := primaryOf(w, 0)
			node := nodes[slices.IndexFunc(nodes, func(n *localcluster.Node) bool { return n.Spec.ID == primary })]
			if err := node.Kill(); err != nil {
				t.Fatal(err)
			}
			go func() { time.Sleep(time.Second); _ = cl.Restart(ctx, node) }()
		}
		key := fmt.Sprintf("lin%d", i)
		for {
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := w.Call(callCtx, "kv", 0, "put", []byte(key+"=v"), neptune.WithIdempotencyKey(key))
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("put %s: %v", key, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for {
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := r.Call(callCtx, "kv", 0, "get", []byte(key))
			cancel()
			if err == nil {
				if string(resp.Body) != "v" {
					t.Fatalf("read %s = %q, want v", key, resp.Body)
				}
				break
			}
			if !neptune.Retryable(err) || ctx.Err() != nil {
				t.Fatalf("read %d: %s, acknowledged before the read began: %v (a stale read)", i, key, err)
			}
			retried++
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("%d acknowledged writes each read at once by another client, through a primary kill; %d read attempts failed retryably", n, retried)
}
