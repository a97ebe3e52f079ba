package dashboard

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/client"
)

// A gateway's dashboard has only its client's departed members
// (Client.Departed): they show as dead members at their last address
// without late loads, and their replicas join their partitions as gone.
func TestClientDepartedShowAsGone(t *testing.T) {
	m := client.Member{Node: "n09", RPCAddr: "10.0.0.9:7000", Services: []client.HostedService{{Name: "kv", Partitions: []int{0, 5}, Load: map[int]int{0: -1, 5: -1}}}}
	ds := []client.Departed{{Member: m, LastSeen: time.Unix(100, 0), Why: "gone", Partitions: []client.PartitionInfo{
		{Service: "kv", Partition: 0, Level: 3, Replicas: []client.ReplicaInfo{{Node: "n09", Role: "secondary", Epoch: 3, Version: 70}}},
		{Service: "kv", Partition: 5, Level: 3, Replicas: []client.ReplicaInfo{{Node: "n09", Role: "secondary", Epoch: 1, Version: 9}}}}}}
	fc := newFakeCluster(3, 1)
	v := buildPartitions("n00", time.Now(), Filter{Partition: -1}, WithClientDeparted(fc.parts, ds))
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
	fd := FromClientDeparted(ds)
	if len(fd) != 1 || fd[0].RPCAddr != "10.0.0.9:7000" || fd[0].Why != "gone" || !fd[0].LastSeen.Equal(time.Unix(100, 0)) ||
		len(fd[0].Services) != 1 || len(fd[0].Services[0].Partitions) != 2 || fd[0].Services[0].Load != nil {
		t.Errorf("FromClientDeparted: %+v; want n09's last address, services without loads, last seen, why", fd)
	}
}
