package node

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/rebalance"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// startPlacement runs the placement controller (internal/rebalance) over
// the node's replicated services: every node runs it, and the one that
// is the actor acts.
func (n *Node) startPlacement() {
	if n.cfg.Placement.Off {
		return
	}
	var services []rebalance.Service
	for name, h := range n.services {
		if r := h.svc.Replication; r != nil && r.MinLive == 0 {
			services = append(services, rebalance.Service{Name: name, Partitions: h.partitions,
				Degree: func(p int32) int { return len(r.ReplicasOf(int(p))) }})
		}
	}
	if len(services) == 0 {
		return
	}
	slices.SortFunc(services, func(a, b rebalance.Service) int { return strings.Compare(a.Name, b.Name) })
	n.placer = rebalance.New(n.cfg.Placement, n.cfg.ID, services, (*yellowPages)(n), (*yellowPages)(n), n.clock, n.log)
	n.placer.Start()
}

// yellowPages is the node as the placement controller sees it: its
// yellow pages (rebalance.Source) and its client's ChangeReplicas
// (rebalance.Changer).
type yellowPages Node

func (y *yellowPages) View() rebalance.View {
	g := y.client.Gossip()
	var v rebalance.View
	for _, e := range g.Snapshot() {
		v.Live = append(v.Live, e.Ann)
	}
	for _, d := range g.Departed() {
		v.Departed = append(v.Departed, rebalance.Departed{Ann: d.Ann, LastSeen: d.LastSeen})
	}
	return v
}

func (y *yellowPages) ChangeReplicas(ctx context.Context, node string, req *pb.ChangeReplicasRequest) error {
	rs, err := y.client.ChangeReplicaSet(ctx, node, req)
	if err != nil {
		return err
	}
	if !rs.Done {
		return fmt.Errorf("%w: %s/%d: not committed before the timeout", nerr.ErrDeadline, req.Service, req.Partition)
	}
	return nil
}
