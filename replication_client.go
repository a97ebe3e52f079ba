package neptune

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// replView is what the yellow pages say about a replicated partition.
type replView struct {
	level   int
	primary string // the announced primary of the highest epoch
	// versionAgo is the announced primary's level-3 version x seconds ago
	// (stale by up to an announce interval: only a fallback).
	versionAgo uint64
	recovering map[string]bool
}

// replView returns the view of service's partition, false if it is not
// replicated.
func (c *Client) replView(service string, partition int32) (replView, bool) {
	var v replView
	var epoch uint64
	found := false
	for _, e := range c.gossip.Snapshot() {
		for _, s := range e.Ann.Services {
			if s.Name != service {
				continue
			}
			for _, r := range s.Replicas {
				if r.Partition != partition {
					continue
				}
				found = true
				v.level = int(r.Level)
				if r.Role == 0 {
					if v.recovering == nil {
						v.recovering = map[string]bool{}
					}
					v.recovering[e.Ann.NodeId] = true
				}
				if r.Role == 2 && r.Epoch >= epoch {
					epoch, v.primary, v.versionAgo = r.Epoch, e.Ann.NodeId, r.VersionAgo
				}
			}
		}
	}
	return v, found
}

// direct is the replica a call must go to without polling: a level-2/3
// write goes to the primary (a secondary would forward it).
func (v replView) direct(req *pb.CallRequest, ids []string) (string, bool) {
	if v.level >= 2 && Mode(req.Mode) == Write && slices.Contains(ids, v.primary) {
		return v.primary, true
	}
	return "", false
}

// candidates drops replicas announced as recovering, unless none is left.
func (v replView) candidates(ids []string) []string {
	kept := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return v.recovering[id] })
	if len(kept) == 0 {
		return ids
	}
	return kept
}

// mustPoll is who a read must poll besides the policy's choice: at level 3
// the primary, whose reply carries its current version of x seconds ago.
func (v replView) mustPoll(req *pb.CallRequest, ids []string) string {
	if v.level == 3 && Mode(req.Mode) == Read && slices.Contains(ids, v.primary) {
		return v.primary
	}
	return ""
}

// fresh keeps the replicas that may serve a read, judged from current poll
// replies (beyond the paper, which uses announced versions): serving, and
// at level 3 at or above both the primary's version x seconds ago and the
// session's floor req.MinVersion. If none qualifies, only the primary
// remains. ok is false when ids should stay as they are.
func (v replView) fresh(req *pb.CallRequest, ids []string, answers []transport.PollAnswer) (keep []string, ok bool) {
	if Mode(req.Mode) != Read || len(answers) == 0 {
		return nil, false
	}
	var floor uint64
	if v.level == 3 {
		floor = req.MinVersion
		ago := v.versionAgo
		for _, a := range answers {
			if a.Version.Primary {
				ago = a.Version.VersionAgo
			}
		}
		floor = max(floor, ago)
	}
	for _, a := range answers {
		if a.Version.Serving && a.Version.Version >= floor {
			keep = append(keep, a.Replica)
		}
	}
	if len(keep) == 0 {
		if v.level == 3 && slices.Contains(ids, v.primary) {
			return []string{v.primary}, true
		}
		return nil, false
	}
	return keep, true
}

// ReplicaInfo is one replica of a partition as the yellow pages show it.
type ReplicaInfo struct {
	Node string
	// Role is "primary", "secondary" or "recovering".
	Role  string
	Phase int
	Epoch uint64
	// Primary is the primary this replica knows of.
	Primary string
	// Version is the highest LSN the replica executed; Commit its commit point.
	Version, Commit uint64
}

// PartitionInfo is a replicated partition: its level and replicas.
type PartitionInfo struct {
	Service   string
	Partition int
	Level     int
	Replicas  []ReplicaInfo
}

// Partitions returns the replicated partitions in the yellow pages, sorted,
// each with its replicas' announced status (as of their last announcement).
func (c *Client) Partitions() []PartitionInfo {
	type key struct {
		s string
		p int32
	}
	byKey := map[key]*PartitionInfo{}
	for _, e := range c.gossip.Snapshot() {
		for _, s := range e.Ann.Services {
			for _, r := range s.Replicas {
				k := key{s.Name, r.Partition}
				pi := byKey[k]
				if pi == nil {
					pi = &PartitionInfo{Service: s.Name, Partition: int(r.Partition), Level: int(r.Level)}
					byKey[k] = pi
				}
				pi.Replicas = append(pi.Replicas, ReplicaInfo{Node: e.Ann.NodeId, Role: replicaRole(r.Role), Phase: int(r.Phase),
					Epoch: r.Epoch, Primary: r.Primary, Version: r.Version, Commit: r.Commit})
			}
		}
	}
	out := make([]PartitionInfo, 0, len(byKey))
	for _, pi := range byKey {
		slices.SortFunc(pi.Replicas, func(a, b ReplicaInfo) int { return strings.Compare(a.Node, b.Node) })
		out = append(out, *pi)
	}
	slices.SortFunc(out, func(a, b PartitionInfo) int {
		if c := strings.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		return a.Partition - b.Partition
	})
	return out
}

func replicaRole(r int32) string {
	return replica.Role(r).String()
}

// Promote makes node's replica of service's partition the primary without
// an election: the operator's recovery when fewer than a majority of the
// partition's replicas survive (promote the one with the newest version;
// the others recover from it). Writes only the lost replicas held are lost.
func (c *Client) Promote(ctx context.Context, node, service string, partition int) (ReplicaInfo, error) {
	var addr string
	for _, e := range c.gossip.Snapshot() {
		if e.Ann.NodeId == node {
			addr = e.Ann.RpcAddr
		}
	}
	if addr == "" {
		return ReplicaInfo{}, fmt.Errorf("%w: node %q is not in the yellow pages", nerr.ErrNoReplica, node)
	}
	cl, err := c.conns.Client(addr)
	if err != nil {
		return ReplicaInfo{}, err
	}
	out, err := cl.Promote(ctx, &pb.PromoteRequest{Service: service, Partition: int32(partition)})
	if err != nil {
		return ReplicaInfo{}, transport.FromStatus(node, err)
	}
	st := out.Status
	return ReplicaInfo{Node: node, Role: replicaRole(st.Role), Phase: int(st.Phase), Epoch: st.Epoch, Primary: st.Primary,
		Version: st.Version, Commit: st.Commit}, nil
}
