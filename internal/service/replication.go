package service

import (
	"fmt"
	"slices"
	"time"
)

// Replication declares how a service's partitions are replicated
// (dissertation ch. 5: operation replication). Each partition has a set of
// replicas on named nodes, each with a priority; the highest-priority live
// replica is the preferred primary. Writes are logged in a durable REDO log
// per partition replica and executed by every replica's own handler, in LSN
// order at levels 2 and 3.
//
// Every node hosting the service must be given the same Replication (the
// usual way is one shared config file). A partition's replicas come from
// Replicas if listed there, otherwise from Place(partition, Nodes, Degree).
type Replication struct {
	// Level is the consistency level: 1 (write anywhere, commutative
	// writes, asynchronous propagation), 2 (primary-ordered writes) or 3
	// (level 2 plus staleness control and per-session version delivery).
	Level int
	// Staleness is level 3's bound x: a read is served by a replica at most
	// this far behind the primary. Default 1 s.
	Staleness time.Duration
	// Replicas lists, per partition, its replicas and priorities; it
	// overrides the placement function for the partitions it names.
	Replicas map[int][]ReplicaSpec
	// Nodes and Degree feed Place for the partitions Replicas omits.
	Nodes  []string
	Degree int
	// MinLive is the smallest live set that may commit and the votes an
	// election needs. 0 means a majority of the partition's replicas, which
	// stays safe under network partitions; 1 is the paper's behaviour.
	MinLive int
	// Heartbeat, AckTimeout, ElectionTimeout and WriteWait tune the
	// protocol (defaults 50 ms, 500 ms, 300 ms and 1 s; see
	// internal/replica.Config). AckTimeout also bounds failure detection.
	Heartbeat, AckTimeout, ElectionTimeout, WriteWait time.Duration
	// Lease is how long a majority's acknowledgement lets a primary serve
	// alone (default 400 ms); a new primary is elected only after the old
	// lease must have lapsed, so failover takes at least this long.
	Lease time.Duration
	// Linearizable makes reads and writes linearizable (beyond the
	// papers): reads go to the primary and run only while it holds its
	// lease and has executed everything committed.
	Linearizable bool
}

// ReplicaSpec is one replica of a partition: the node hosting it and its
// priority (higher is preferred as primary).
type ReplicaSpec struct {
	Node     string
	Priority int
}

// Place is the deterministic placement function: partition p's degree
// replicas go to nodes[(p+i) mod len(nodes)] for i = 0..degree-1, with
// priority degree-i. Consecutive partitions therefore start on consecutive
// nodes (chained declustering), so primaries and load spread evenly and a
// node's failure moves its partitions' primary roles to different nodes.
// The order of nodes matters and must be the same everywhere. It returns
// nil if degree is not in 1..len(nodes).
func Place(partition int, nodes []string, degree int) []ReplicaSpec {
	if degree < 1 || degree > len(nodes) || partition < 0 {
		return nil
	}
	out := make([]ReplicaSpec, degree)
	for i := range degree {
		out[i] = ReplicaSpec{Node: nodes[(partition+i)%len(nodes)], Priority: degree - i}
	}
	return out
}

// ReplicasOf returns partition's replicas (explicit or placed).
func (r *Replication) ReplicasOf(partition int) []ReplicaSpec {
	if rs, ok := r.Replicas[partition]; ok {
		return rs
	}
	return Place(partition, r.Nodes, r.Degree)
}

// PartitionsOn returns those of partitions that have a replica on node:
// what that node should Register.
func (r *Replication) PartitionsOn(node string, partitions []int) []int {
	var out []int
	for _, p := range partitions {
		if slices.ContainsFunc(r.ReplicasOf(p), func(s ReplicaSpec) bool { return s.Node == node }) {
			out = append(out, p)
		}
	}
	return out
}

// Validate reports the first invalid field by name.
func (r *Replication) Validate() error {
	if r.Level < 1 || r.Level > 3 {
		return fmt.Errorf("Replication.Level must be 1, 2 or 3, got %d", r.Level)
	}
	for name, d := range map[string]time.Duration{"Staleness": r.Staleness, "Heartbeat": r.Heartbeat,
		"AckTimeout": r.AckTimeout, "ElectionTimeout": r.ElectionTimeout, "WriteWait": r.WriteWait} {
		if d < 0 {
			return fmt.Errorf("Replication.%s must be >= 0, got %v", name, d)
		}
	}
	if r.MinLive < 0 {
		return fmt.Errorf("Replication.MinLive must be >= 0, got %d", r.MinLive)
	}
	if len(r.Nodes) > 0 || r.Degree != 0 {
		if r.Degree < 1 || r.Degree > len(r.Nodes) {
			return fmt.Errorf("Replication.Degree must be in 1..len(Nodes) (%d), got %d", len(r.Nodes), r.Degree)
		}
		if dup := firstDup(r.Nodes); dup != "" {
			return fmt.Errorf("Replication.Nodes lists %q twice", dup)
		}
	}
	for p, rs := range r.Replicas {
		if len(rs) == 0 {
			return fmt.Errorf("Replication.Replicas[%d] is empty", p)
		}
		nodes := make([]string, len(rs))
		for i, s := range rs {
			if s.Node == "" {
				return fmt.Errorf("Replication.Replicas[%d][%d].Node is empty", p, i)
			}
			nodes[i] = s.Node
		}
		if dup := firstDup(nodes); dup != "" {
			return fmt.Errorf("Replication.Replicas[%d] lists node %q twice", p, dup)
		}
		if r.MinLive > len(rs) {
			return fmt.Errorf("Replication.MinLive %d exceeds partition %d's %d replicas", r.MinLive, p, len(rs))
		}
	}
	if r.MinLive > r.Degree && len(r.Nodes) > 0 {
		return fmt.Errorf("Replication.MinLive %d exceeds Degree %d", r.MinLive, r.Degree)
	}
	return nil
}

func firstDup(xs []string) string {
	seen := map[string]bool{}
	for _, x := range xs {
		if seen[x] {
			return x
		}
		seen[x] = true
	}
	return ""
}
