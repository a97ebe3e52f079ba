package dashboard

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/client"
)

// The replicas of departed members (Client.Departed) join their
// partitions as gone, with their last announced status; a partition none
// of whose replicas is left still shows, without a primary.
func TestClientDepartedShowAsGone(t *testing.T) {
	m := client.Member{Node: "n09", RPCAddr: "10.0.0.9:7000", Services: []client.HostedService{{Name: "kv", Partitions: []int{0, 5}, Load: map[int]int{0: -1, 5: -1}}}}
	ds := []client.Departed{{Member: m, LastSeen: time.Unix(100, 0), Why: "gone", Partitions: []client.PartitionInfo{
		{Service: "kv", Partition: 0, Level: 3, Replicas: []client.ReplicaInfo{{Node: "n09", Role: "secondary", Epoch: 3, Version: 70}}},
		{Service: "kv", Partition: 5, Level: 3, Replicas: []client.ReplicaInfo{{Node: "n09", Role: "secondary", Epoch: 1, Version: 9}}}}}}
	fc := newFakeCluster(3, 1)
	v := buildPartitions("n00", time.Now(), Filter{Partition: -1}, withDeparted(fc.parts, ds), nil)
	if v.Total != 2 || v.NoPrimary != 1 {
		t.Fatalf("%d partitions, %d without primary; want 2 and 1", v.Total, v.NoPrimary)
	}
	p0, p5 := v.Partitions[0], v.Partitions[1]
	if len(p0.Replicas) != 4 || p0.Primary != "n00" || p0.Replicas[3].Node != "n09" || p0.Replicas[3].Role != RoleGone || p0.Replicas[3].Version != 70 {
		t.Errorf("partition 0: %+v; want n09 added as gone with version 70, n00 still primary", p0)
	}
	if p5.Partition != 5 || p5.Level != 3 || p5.Primary != "" || len(p5.Replicas) != 1 || p5.Replicas[0].Role != RoleGone {
		t.Errorf("partition 5: %+v; want only n09, gone, no primary", p5)
	}
	if len(fc.parts[0].Replicas) != 3 {
		t.Errorf("the source's listing changed: %+v", fc.parts[0])
	}
}

// TestClientPartitionsShowLeasesAndStaleReplicas: a gateway's Partitions
// view (from its client's listing) shows the primary's lease and marks a
// level-3 replica below the primary's version of Staleness ago.
func TestClientPartitionsShowLeasesAndStaleReplicas(t *testing.T) {
	ps := []client.PartitionInfo{{Service: "kv", Partition: 0, Level: 3, Replicas: []client.ReplicaInfo{
		{Node: "n1", Role: "primary", Epoch: 2, Version: 100, Lease: 300 * time.Millisecond, VersionAgo: 90},
		{Node: "n2", Role: "secondary", Epoch: 2, Version: 95},
		{Node: "n3", Role: "secondary", Epoch: 2, Version: 80},
	}}}
	v := buildPartitions("gw", time.Now(), Filter{Partition: -1}, ps, nil)
	if len(v.Partitions) != 1 {
		t.Fatalf("%d partitions, want 1", len(v.Partitions))
	}
	p := v.Partitions[0]
	if p.LeaseMs != 300 {
		t.Errorf("lease %d ms, want 300", p.LeaseMs)
	}
	stale := map[string]bool{}
	for _, r := range p.Replicas {
		stale[r.Node] = r.Stale
	}
	if stale["n1"] || stale["n2"] || !stale["n3"] {
		t.Errorf("stale marks %v, want only n3 (version 80 < 90)", stale)
	}
}
