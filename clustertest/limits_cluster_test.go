package clustertest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
)

// An oversized body through a real node process (kv at level 2 on three
// processes) is refused with ErrTooLarge, not logged or run; the node
// keeps serving and no election follows.
func TestOversizedBodyOnNodeProcessesIsRefusedWithoutElection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, _, c := appProcs(t, ctx, "t", "kv", 1, 2, "")
	if _, err := writeRetrying(ctx, c, nil, 0, "k=v"); err != nil {
		t.Fatal(err)
	}
	epoch := func() uint64 {
		var e uint64
		for _, p := range c.Partitions() {
			for _, r := range p.Replicas {
				if p.Service == "kv" && p.Partition == 0 {
					e = max(e, r.Epoch)
				}
			}
		}
		return e
	}
	before := epoch()
	// A client allowing 64 MiB sends 20 MiB: the node (16 MiB default) refuses.
	big, err := neptune.Dial(ctx, neptune.ClientConfig{Security: cl.ClientSecurity("client/client"), Join: cl.Seeds(), MaxMessageBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	body := append([]byte("big="), bytes.Repeat([]byte("x"), 20<<20)...)
	start := time.Now()
	if _, err := big.Call(ctx, "kv", 0, "put", body); !errors.Is(err, neptune.ErrTooLarge) || neptune.Retryable(err) {
		t.Fatalf("20 MiB put: %v, want ErrTooLarge, not retryable", err)
	}
	t.Logf("refused in %v", time.Since(start))
	time.Sleep(2 * time.Second) // heartbeats and failure detection run meanwhile
	if _, err := writeRetrying(ctx, c, nil, 0, "k2=v2"); err != nil {
		t.Fatalf("node stopped serving: %v", err)
	}
	if resp, err := c.Call(ctx, "kv", 0, "get", []byte("big")); err == nil && len(resp.Body) > 0 {
		t.Fatal("the oversized write was applied")
	}
	if after := epoch(); after != before || before == 0 {
		t.Fatalf("epoch %d before, %d after: an election happened", before, after)
	}
}
