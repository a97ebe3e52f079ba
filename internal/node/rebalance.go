package node

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/placement"
	"github.com/neptune-cluster/neptune/internal/rebalance"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// startPlacement runs the placement controller (internal/rebalance) over
// the node's replicated services: every node runs it, and the one that
// is the actor acts.
func (n *Node) startPlacement() {
	n.placeMu.Lock()
	defer n.placeMu.Unlock()
	n.startPlacementLocked(n.cfg.Placement)
}

func (n *Node) startPlacementLocked(cfg placement.Config) {
	n.placementOff.Store(cfg.Off)
	if cfg.Off {
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
	n.placer = rebalance.New(cfg, n.cfg.ID, services, (*yellowPages)(n), (*yellowPages)(n), n.clock, n.log)
	n.placer.Start()
}

// SetPlacement applies new placement settings while the node runs (an
// operator's SIGHUP): turning it off or on, grace, interval, moves in
// flight. The node announces the change at once.
func (n *Node) SetPlacement(cfg placement.Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("neptune: placement: %w", err)
	}
	n.placeMu.Lock()
	switch {
	case n.placer != nil:
		n.placementOff.Store(cfg.Off)
		n.placer.SetConfig(cfg)
	case n.repl != nil:
		n.startPlacementLocked(cfg)
	default:
		n.placementOff.Store(cfg.Off)
	}
	n.placeMu.Unlock()
	n.announceNow()
	return nil
}

// yellowPages is the node as the placement controller sees it: its
// yellow pages (rebalance.Source) and its client's ChangeReplicas
// (rebalance.Changer).
type yellowPages Node

func (y *yellowPages) View() rebalance.View {
	g := y.client.Gossip()
	v := rebalance.View{Departed: g.Departures()}
	for _, e := range g.Snapshot() {
		v.Live = append(v.Live, e.Ann)
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
