package node

import (
	"context"
	"github.com/neptune-cluster/neptune/internal/config"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/internal/service"
)

// TestReplicatedRegisterIsAllOrNothing: a replicated service one of whose
// partitions has an invalid replica set is refused whole; none of its
// partitions is left to the replication runtime. A partition whose
// replica set does not name this node is on standby: registered, but
// neither announced nor served until a replica-set change names the node.
func TestReplicatedRegisterIsAllOrNothing(t *testing.T) {
	n, err := New(Config{Node: config.Node{Security: config.Security{Insecure: true}, ID: "a", DataDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *service.Request) (*service.Response, error) { return nil, nil }
	svc := service.Service{Name: "kv", Methods: []service.Method{{Name: "put", Mode: service.Write, Handler: noop}},
		Replication: &service.Replication{Level: 2, Replicas: map[int][]service.ReplicaSpec{
			0: {{Node: "a", Priority: 1}}, 1: {{Node: "b", Priority: 1}, {Node: "b", Priority: 2}}}}}
	if err := n.Register(svc, 0, 1); err == nil || !strings.Contains(err.Error(), "Replicas[1]") {
		t.Fatalf("Register = %v, want partition 1 refused", err)
	}
	if n.repl != nil && len(n.repl.Hosting("kv")) != 0 {
		t.Fatal("replication kept partitions of the refused service")
	}
	svc.Replication.Replicas[1] = []service.ReplicaSpec{{Node: "b", Priority: 1}}
	if err := n.Register(svc, 0, 1); err != nil {
		t.Fatalf("partition 1 on standby: %v", err)
	}
}
