package node

import (
	"context"
	"github.com/neptune-cluster/neptune/internal/security"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/internal/service"
)

// TestReplicatedRegisterIsAllOrNothing: a replicated service one of whose
// partitions has no replica on this node is refused whole; none of its
// partitions is left to the replication runtime.
func TestReplicatedRegisterIsAllOrNothing(t *testing.T) {
	n, err := New(Config{Security: security.Config{Insecure: true}, ID: "a", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *service.Request) (*service.Response, error) { return nil, nil }
	svc := service.Service{Name: "kv", Methods: []service.Method{{Name: "put", Mode: service.Write, Handler: noop}},
		Replication: &service.Replication{Level: 2, Replicas: map[int][]service.ReplicaSpec{
			0: {{Node: "a", Priority: 1}}, 1: {{Node: "b", Priority: 1}}}}}
	if err := n.Register(svc, 0, 1); err == nil || !strings.Contains(err.Error(), "partition 1") {
		t.Fatalf("Register = %v, want partition 1 refused", err)
	}
	if got := n.repl.Status("kv", []int32{0, 1}); len(got) != 0 {
		t.Fatalf("replication kept %d partitions of the refused service", len(got))
	}
	if err := n.Register(svc, 0); err != nil {
		t.Fatalf("the valid partition alone: %v", err)
	}
}
