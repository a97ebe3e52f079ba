package client

import (
	"context"

	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// ReplicaSet is a partition's replica set as its primary answered a
// change: Done says whether the change is complete in it (an added
// replica a voter, a removed one gone).
type ReplicaSet struct {
	Members []ReplicaMember
	Done    bool
	Primary string
}

// ReplicaMember is one replica of a replica set; a Learner is still
// catching up and does not serve.
type ReplicaMember struct {
	Node     string
	Priority int
	Learner  bool
}

// ChangeReplicas asks node, the primary of service's partition, to add
// the replica add (with priority) or remove the replica remove, and
// waits, until ctx ends, for the change to commit. An error wrapping
// nerr.ErrNoPrimary means node was not the primary and nothing changed.
func (c *Client) ChangeReplicas(ctx context.Context, node, service string, partition int, add string, priority int, remove string) (ReplicaSet, error) {
	return c.ChangeReplicaSet(ctx, node, &pb.ChangeReplicasRequest{Service: service, Partition: int32(partition), Add: add,
		Priority: int32(priority), Remove: remove})
}

// SetReplicaPriority asks node, the primary of service's partition, to
// change the member replica's priority, and waits like ChangeReplicas.
func (c *Client) SetReplicaPriority(ctx context.Context, node, service string, partition int, replica string, priority int) (ReplicaSet, error) {
	return c.ChangeReplicaSet(ctx, node, &pb.ChangeReplicasRequest{Service: service, Partition: int32(partition), Add: replica,
		Priority: int32(priority), SetPriority: true})
}

// ChangeReplicaSet is ChangeReplicas with the whole request, such as an
// expected replica set (req.Expect) the change is refused without.
func (c *Client) ChangeReplicaSet(ctx context.Context, node string, req *pb.ChangeReplicasRequest) (ReplicaSet, error) {
	cl, err := c.nodeClient(node)
	if err != nil {
		return ReplicaSet{}, err
	}
	out, err := cl.ChangeReplicas(ctx, req)
	if err != nil {
		return ReplicaSet{}, transport.FromStatus(node, err)
	}
	rs := ReplicaSet{Done: out.Done, Primary: out.Primary}
	for _, m := range out.Members {
		rs.Members = append(rs.Members, ReplicaMember{Node: m.Id, Priority: int(m.Priority), Learner: m.Learner})
	}
	return rs, nil
}
