// Package rebalance puts the placement planner (internal/placement) to
// work on a running cluster (issue 17): one node per service, its actor,
// reads the yellow pages, plans, and carries the plan out with the
// replica-set changes an operator makes (`neptune partition add|remove`),
// a bounded number at a time.
//
// Who acts: for each replicated service, the live node with the lowest
// id among those hosting it, by its own yellow pages. Every
// node runs the controller; for each service all but one find they are
// not its actor and do nothing. No election is needed and nothing stalls: when the actor
// dies, the next lowest takes over once membership drops it, and the
// planner keeps no state a successor would need (it plans from the
// cluster as it is). Two nodes may briefly both believe they are the
// actor (their yellow pages differ for a gossip round); every change
// therefore names the replica set it was planned against, and the
// partition's primary refuses it unless that is still the set its log
// says: two actors cannot make conflicting changes to one partition, and
// the second merely sees its change refused and plans again.
//
// The core of this file is pure (View, Observe: no I/O, time as input);
// controller.go is the shell.
package rebalance

import (
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/placement"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Service is a replicated service the actor places: its partitions and
// each one's degree (from the service's configuration).
type Service struct {
	Name       string
	Partitions []int32
	Degree     func(partition int32) int
}

// View is the cluster as one node's yellow pages show it.
type View struct {
	Live []*pb.Announcement
	// Departed are the yellow pages' records of the members they
	// remember as gone: the planner reads their last announcement (Ann)
	// and LastSeen. Wire form, like Live, not the API's client.Departed:
	// the planner needs each partition's replica set (members,
	// priorities, learners), which the API does not show.
	Departed []membership.Departure
}

// Memory is what the actor remembers between rounds: when each node not
// live was first known down, so a node forgotten by the yellow pages
// (departures are kept for a while only) is still replaced after the
// grace, counted from when it was last seen.
type Memory map[string]time.Time

// Actor is the node that acts for service s: the live node with the
// lowest id among those announcing it, placement off on none ("" if
// none). Each service has its
// own actor, since only the nodes hosting a service know its partitions
// and degrees: a node that is the lowest overall but does not host s
// must not keep s's hosts from acting.
func Actor(v View, s Service) string {
	best := ""
	for _, a := range v.Live {
		if (best == "" || a.NodeId < best) && !a.PlacementOff && slices.ContainsFunc(a.Services, func(hs *pb.HostedService) bool { return hs.Name == s.Name }) {
			best = a.NodeId
		}
	}
	return best
}

// Partition is what Observe knows of one partition beyond what the
// planner needs: the replica set with priorities, to name it in changes
// and to give a new replica the priority of the one it replaces.
type Partition struct {
	Members []*pb.ReplicaPeer
}

// Key names a partition.
type Key struct {
	Service   string
	Partition int32
}

// Observe turns a view into the planner's state at now, updating mem. A
// partition's replica set is the one its primary announces (the newest
// epoch's), else the newest any replica announced, departed ones
// included; a partition nobody announced is left out.
func Observe(now time.Time, v View, services []Service, mem Memory) (placement.State, map[Key]Partition) {
	var st placement.State
	live := map[string]bool{}
	for _, a := range v.Live {
		live[a.NodeId] = true
		delete(mem, a.NodeId)
		svcs := []string{} // (not nil: hosts only these)
		for _, hs := range a.Services {
			svcs = append(svcs, hs.Name)
		}
		st.Nodes = append(st.Nodes, placement.Node{ID: a.NodeId, Zone: a.Zone, Alive: true, Services: svcs})
	}
	zone := map[string]string{}
	for _, d := range v.Departed {
		id := d.Ann.GetNodeId()
		if id == "" || live[id] {
			continue
		}
		zone[id] = d.Ann.Zone
		if t, ok := mem[id]; !ok || d.LastSeen.Before(t) {
			mem[id] = d.LastSeen
		}
	}
	type best struct {
		st      *pb.ReplicaStatus
		primary bool
		node    string
	}
	found := map[Key]best{}
	consider := func(a *pb.Announcement, isLive bool) {
		for _, hs := range a.Services {
			for _, rs := range hs.Replicas {
				if len(rs.Members) == 0 {
					continue
				}
				k := Key{hs.Name, rs.Partition}
				prim := isLive && rs.Role == 2
				b, ok := found[k]
				if !ok || prim && (!b.primary || rs.Epoch > b.st.Epoch) || !b.primary && rs.Epoch > b.st.Epoch {
					found[k] = best{rs, prim, a.NodeId}
				}
			}
		}
	}
	for _, a := range v.Live {
		consider(a, true)
	}
	for _, d := range v.Departed {
		if !live[d.Ann.GetNodeId()] {
			consider(d.Ann, false)
		}
	}
	parts := map[Key]Partition{}
	used := map[string]bool{}
	for _, d := range v.Departed {
		used[d.Ann.GetNodeId()] = true
	}
	for _, s := range services {
		for _, p := range s.Partitions {
			k := Key{s.Name, p}
			b, ok := found[k]
			if !ok {
				continue
			}
			pt := placement.Partition{Service: s.Name, Partition: p, Degree: s.Degree(p)}
			if b.primary {
				pt.Primary = b.node
			}
			for _, m := range b.st.Members {
				pt.Replicas = append(pt.Replicas, m.Id)
				used[m.Id] = true
				if m.Learner {
					pt.Joining = append(pt.Joining, m.Id)
				}
				if !live[m.Id] {
					if _, ok := mem[m.Id]; !ok {
						mem[m.Id] = now // never seen by us: count from now
					}
				}
			}
			st.Partitions = append(st.Partitions, pt)
			parts[k] = Partition{Members: b.st.Members}
		}
	}
	ids := make([]string, 0, len(mem))
	for id := range mem {
		if !used[id] {
			delete(mem, id) // nothing of it left to replace
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		st.Nodes = append(st.Nodes, placement.Node{ID: id, Zone: zone[id], DownSince: mem[id]})
	}
	return st, parts
}
