package clustertest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
)

// TestReplicaMetricsShowLagAndElections: on three nodes replicating kv
// partition 0, the primary's node reports it primary (role, has_primary,
// one election, a lease), the others secondary; with a follower closed,
// writes still commit and the primary reports that follower's lag in
// entries and in time, rising, while the live follower shows none.
func TestReplicaMetricsShowLagAndElections(t *testing.T) {
	ids := []string{"m1", "m2", "m3"}
	rep := &neptune.Replication{Level: 2, Nodes: ids, Degree: 3}
	metrics := func(c *neptune.NodeConfig) { c.MetricsAddr = "127.0.0.1:0" }
	nodes := map[string]*neptune.Node{}
	var join []string
	for _, id := range ids {
		nd, err := startKV(t, id, filepath.Join(t.TempDir(), id), rep, join, metrics)
		if err != nil {
			t.Fatal(err)
		}
		nodes[id] = nd
		join = []string{nd.GossipAddr()}
	}
	p0 := map[string]string{"service": "kv", "partition": "0"}
	role := func(id, r string) bool {
		v, _ := gauge(t, nodes[id], "neptune_replica_role", withKey(p0, "role", r))
		return v == 1
	}
	var primary string
	var followers []string
	waitFor(t, 15*time.Second, func() bool {
		primary, followers = "", nil
		for _, id := range ids {
			switch {
			case role(id, "primary"):
				primary = id
			case role(id, "secondary"):
				followers = append(followers, id)
			}
		}
		return primary != "" && len(followers) == 2
	})
	// A primary has one once it holds its lease (a majority's acks), and
	// a secondary once it is in touch with it: soon after the roles, not
	// with them (on a loaded machine m1 read 0 right after).
	waitFor(t, 10*time.Second, func() bool {
		for _, id := range ids {
			if v, _ := gauge(t, nodes[id], "neptune_partition_has_primary", p0); v != 1 {
				return false
			}
		}
		return true
	})
	if v, _ := gauge(t, nodes[primary], "neptune_replica_elections_total", p0); v != 1 {
		t.Errorf("primary %s: elections_total %v, want 1", primary, v)
	}
	waitFor(t, 5*time.Second, func() bool {
		v, _ := gauge(t, nodes[primary], "neptune_replica_lease_remaining_seconds", p0)
		return v > 0
	})

	gone, live := followers[0], followers[1]
	if err := nodes[gone].Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := nodes[primary].Client()
	for i := range 10 {
		if _, err := writeRetrying(ctx, c, nil, 0, fmt.Sprintf("k%d=v", i)); err != nil {
			t.Fatal(err)
		}
	}
	lagOf := func(name, replica string) float64 {
		v, ok := gauge(t, nodes[primary], name, withKey(p0, "replica", replica))
		if !ok {
			t.Fatalf("primary %s reports no %s for %s", primary, name, replica)
		}
		return v
	}
	waitFor(t, 5*time.Second, func() bool { return lagOf("neptune_replica_lag_entries", gone) >= 10 })
	first := lagOf("neptune_replica_lag_seconds", gone)
	waitFor(t, 5*time.Second, func() bool { return lagOf("neptune_replica_lag_seconds", gone) > first && first > 0 })
	waitFor(t, 5*time.Second, func() bool {
		return lagOf("neptune_replica_lag_entries", live) == 0 && lagOf("neptune_replica_lag_seconds", live) == 0
	})
	// It keeps counting once the follower is judged dead (after 1 s):
	// what NeptuneReplicaLagging alerts on.
	waitFor(t, 10*time.Second, func() bool { return lagOf("neptune_replica_lag_seconds", gone) > 1.5 })
	applied, _ := gauge(t, nodes[primary], "neptune_replica_applied_lsn", p0)
	committed, _ := gauge(t, nodes[primary], "neptune_replica_committed_lsn", p0)
	if applied < 10 || committed < 10 {
		t.Errorf("primary applied %v, committed %v after 10 writes", applied, committed)
	}
	t.Logf("primary %s: %v entries and %.2fs of lag for closed %s; none for %s", primary,
		lagOf("neptune_replica_lag_entries", gone), lagOf("neptune_replica_lag_seconds", gone), gone, live)
}
