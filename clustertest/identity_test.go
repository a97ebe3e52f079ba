package clustertest

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
)

func TestDuplicateNodeIDIsRefusedAndTheFirstKeepsServing(t *testing.T) {
	rep := &neptune.Replication{Level: 2, Nodes: []string{"a", "b"}, Degree: 2}
	a, err := startKV(t, "a", filepath.Join(t.TempDir(), "a"), rep, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startKV(t, "b", filepath.Join(t.TempDir(), "b"), rep, []string{a.GossipAddr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := a.Client()
	if _, err := writeRetrying(ctx, c, nil, 0, "k1=v1"); err != nil {
		t.Fatal(err)
	}
	for _, seed := range []string{a.GossipAddr(), b.GossipAddr()} {
		_, err = startKV(t, "b", filepath.Join(t.TempDir(), "b2"), rep, []string{seed}, nil)
		if err == nil || !strings.Contains(err.Error(), `node id "b" is live`) {
			t.Fatalf("second process with id b (seed %s): %v, want a refusal naming the id", seed, err)
		}
	}
	if _, err := writeRetrying(ctx, c, nil, 0, "k2=v2"); err != nil {
		t.Fatalf("cluster stopped serving after the duplicate was refused: %v", err)
	}
	resp, err := c.Call(ctx, "kv", 0, "get", []byte("k1"))
	if err != nil || string(resp.Body) != "v1" {
		t.Fatalf("get k1 = %v, %v", resp, err)
	}
}

func TestForeignDataDirIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	a, err := startKV(t, "a", dir, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	for _, tc := range []struct {
		id, cluster, names string
	}{
		{"b", "", `belongs to node "a"`},
		{"a", "other", `cluster "neptune"`},
	} {
		_, err := startKV(t, tc.id, dir, nil, nil, func(c *neptune.NodeConfig) { c.Cluster = tc.cluster })
		if err == nil || !strings.Contains(err.Error(), tc.names) {
			t.Fatalf("start %s/%s on a's data dir: %v, want a refusal naming %s", tc.cluster, tc.id, err, tc.names)
		}
	}
	if _, err := startKV(t, "a", dir, nil, nil, nil); err != nil {
		t.Fatalf("a on its own data dir: %v", err)
	}
}

func TestMismatchedReplicationIsRefusedNamingTheField(t *testing.T) {
	rep := neptune.Replication{Level: 3, Nodes: []string{"a", "b"}, Degree: 2}
	a, err := startKV(t, "a", filepath.Join(t.TempDir(), "a"), &rep, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		rep   *neptune.Replication
		field string
	}{
		{"level", &neptune.Replication{Level: 2, Nodes: []string{"a", "b"}, Degree: 2}, "replication.level"},
		{"degree", &neptune.Replication{Level: 3, Nodes: []string{"a", "b"}, Degree: 1, Replicas: map[int][]neptune.ReplicaSpec{0: {{Node: "b", Priority: 1}}}}, "replication.degree"},
		{"staleness", &neptune.Replication{Level: 3, Nodes: []string{"a", "b"}, Degree: 2, Staleness: 3 * time.Second}, "replication.staleness"},
		{"min_live", &neptune.Replication{Level: 3, Nodes: []string{"a", "b"}, Degree: 2, MinLive: 1}, "replication.min_live"},
		{"none", nil, "replication is false here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := startKV(t, "b", filepath.Join(t.TempDir(), "b"), tc.rep, []string{a.GossipAddr()}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("start b: %v, want a refusal naming %s", err, tc.field)
			}
		})
	}
	_, err = startKV(t, "b", filepath.Join(t.TempDir(), "b"), &rep, []string{a.GossipAddr()}, func(c *neptune.NodeConfig) { c.Cluster = "other" })
	if err == nil || !strings.Contains(err.Error(), "Cluster") {
		t.Fatalf("start b in another cluster: %v, want a refusal naming Cluster", err)
	}
	if _, err := startKV(t, "b", filepath.Join(t.TempDir(), "b"), &rep, []string{a.GossipAddr()}, nil); err != nil {
		t.Fatalf("b with the same block: %v", err)
	}
}

func TestOversizedBodyIsRefusedWithoutElection(t *testing.T) {
	rep := &neptune.Replication{Level: 2, Nodes: []string{"a", "b"}, Degree: 2}
	small := func(c *neptune.NodeConfig) { c.MaxMessageBytes = 1 << 20 }
	a, err := startKV(t, "a", filepath.Join(t.TempDir(), "a"), rep, nil, small)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := startKV(t, "b", filepath.Join(t.TempDir(), "b"), rep, []string{a.GossipAddr()}, small); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := a.Client()
	if _, err := writeRetrying(ctx, c, nil, 0, "k=v"); err != nil {
		t.Fatal(err)
	}
	epoch := func() uint64 { // the highest epoch any replica announces
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
	time.Sleep(300 * time.Millisecond) // an announcement after the first write
	before := epoch()
	// The client's own limit (16 MiB default) is above the node's: the node refuses.
	big := append([]byte("big="), bytes.Repeat([]byte("x"), 2<<20)...)
	_, err = c.Call(ctx, "kv", 0, "put", big)
	if !errors.Is(err, neptune.ErrTooLarge) || neptune.Retryable(err) {
		t.Fatalf("2 MiB put on a 1 MiB node: %v, want ErrTooLarge, not retryable", err)
	}
	// A client with a smaller limit refuses before sending.
	dc, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: []string{a.GossipAddr()}, MaxMessageBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if _, err := dc.Call(ctx, "kv", 0, "put", big[:4<<10]); !errors.Is(err, neptune.ErrTooLarge) || !strings.Contains(err.Error(), "never ran") {
		t.Fatalf("4 KiB put on a 1 KiB client: %v, want ErrTooLarge saying it never ran", err)
	}
	time.Sleep(time.Second) // heartbeats and failure detection run meanwhile
	if _, err := writeRetrying(ctx, c, nil, 0, "k2=v2"); err != nil {
		t.Fatalf("node stopped serving: %v", err)
	}
	if after := epoch(); after != before || before == 0 {
		t.Fatalf("epoch %d before, %d after: an election happened", before, after)
	}
	if resp, err := c.Call(ctx, "kv", 0, "get", []byte("big")); err == nil && len(resp.Body) > 0 {
		t.Fatal("the oversized write was applied")
	}
}
