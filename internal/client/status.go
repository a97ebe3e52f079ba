package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Member is one node in the yellow pages, as Members reports it.
type Member struct {
	Node        string
	RPCAddr     string
	PollAddr    string
	MetricsAddr string
	Zone        string        // failure domain (NodeConfig.Zone)
	Age         time.Duration // since the last announcement
	Services    []HostedService
}

// HostedService is a service a member hosts.
type HostedService struct {
	Name       string
	Partitions []int
	// Load is the polled load index per partition (-1 if the poll was late).
	Load map[int]int
}

// Members returns the yellow pages, polling each member's load for every
// partition it hosts (answers later than wait count as -1); wait <= 0
// lists them without polling (every load -1).
func (c *Client) Members(ctx context.Context, wait time.Duration) []Member {
	now := c.clock.Now()
	var out []Member
	for _, e := range c.gossip.Snapshot() {
		a := e.Ann
		if len(a.Services) == 0 {
			continue
		}
		m := memberOf(a, now.Sub(e.Seen))
		if wait > 0 {
			c.PollLoad(ctx, m, wait)
		}
		out = append(out, m)
	}
	return out
}

// memberOf is the member a announces, seen age ago, every load -1.
func memberOf(a *pb.Announcement, age time.Duration) Member {
	m := Member{Node: a.NodeId, RPCAddr: a.RpcAddr, PollAddr: a.PollAddr, MetricsAddr: a.MetricsAddr, Zone: a.Zone, Age: age}
	for _, s := range a.Services {
		hs := HostedService{Name: s.Name, Load: map[int]int{}}
		for _, p := range s.Partitions {
			hs.Partitions = append(hs.Partitions, int(p))
			hs.Load[int(p)] = -1
		}
		m.Services = append(m.Services, hs)
	}
	return m
}

// PollLoad polls m's load for every partition it hosts, all at once, into
// m's Load maps (which it must have); a poll not answered within wait, or
// before ctx ends, leaves its load as it was.
func (c *Client) PollLoad(ctx context.Context, m Member, wait time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range m.Services {
		for _, p := range s.Partitions {
			wg.Go(func() {
				for _, ans := range c.poller.Poll(ctx, []transport.PollTarget{{Replica: m.Node, Addr: m.PollAddr}}, s.Name, int32(p), "", wait) {
					mu.Lock()
					s.Load[p] = ans.Queue
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
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
	// Version is the highest LSN the replica executed; Commit its commit
	// point; Last its last log entry, committed or not.
	Version, Commit, Last uint64
	// Lease (primary) is what was left of its majority lease when it
	// announced (or answered); 0: it holds none and is not fresh.
	Lease time.Duration
	// VersionAgo (a level-3 primary) is its committed version Staleness
	// ago: a replica below it is beyond the staleness bound.
	VersionAgo uint64
	// Diverged: the replica found its log differs from the primary's below
	// its commit point; it serves nothing until rebuilt.
	Diverged bool
	// LeaseUntil (a primary that announced a lease) is when, by this
	// client's clock, its claim and lease lapse unless it announces again
	// (membership.Claim). Zero without a lease or in a Promote's answer.
	LeaseUntil time.Time
	// Stale says in words why a primary's claim no longer holds, or "":
	// its lease lapsed with no newer announcement (a paused, killed or
	// cut-off primary stops announcing), or a higher epoch's primary
	// superseded it. Status and the dashboard show it beside the claim.
	Stale string
	// Contact is "lost-contact" (a replica whose primary has been silent
	// for its AckTimeout: a one-way cut, a dead primary, an election),
	// "no-quorum" (a primary whose majority has been silent for half its
	// lease) or ""; LostSince is since when, by this client's clock.
	Contact   string
	LostSince time.Time
}

// PartitionInfo is a replicated partition: its level and replicas.
type PartitionInfo struct {
	Service   string
	Partition int
	Level     int
	// Linearizable: the service's reads and writes are linearizable.
	Linearizable bool
	Replicas     []ReplicaInfo
}

// replicaInfo is node's replica status st as ReplicaInfo.
func replicaInfo(node string, st *pb.ReplicaStatus) ReplicaInfo {
	return ReplicaInfo{Node: node, Role: replica.Role(st.Role).String(), Phase: int(st.Phase), Epoch: st.Epoch, Primary: st.Primary,
		Version: st.Version, Commit: st.Commit, Last: st.Last, Lease: time.Duration(st.LeaseMs) * time.Millisecond, VersionAgo: st.VersionAgo, Diverged: st.Diverged}
}

// readReplica is node's status st announced in an announcement received
// at seen, as a reader judges it at now (before supersession: judge).
func readReplica(now, seen time.Time, node string, st *pb.ReplicaStatus) ReplicaInfo {
	ri := replicaInfo(node, st)
	claim := membership.ReadClaim(seen, st)
	ri.LeaseUntil, ri.Contact, ri.LostSince = claim.LeaseUntil, claim.Contact, claim.LostSince
	if ri.Role == replica.Primary.String() && claim.Lapsed(now) {
		ri.Stale = fmt.Sprintf("lease lapsed %v ago without a newer announcement", now.Sub(claim.LeaseUntil).Round(time.Millisecond))
	}
	return ri
}

// judge marks the primaries of pi that a primary of a higher epoch
// superseded: that one was elected after their leases ran out, whatever
// their last announcement says.
func judge(pi *PartitionInfo) {
	var top uint64
	for _, r := range pi.Replicas {
		if r.Role == replica.Primary.String() {
			top = max(top, r.Epoch)
		}
	}
	for i, r := range pi.Replicas {
		if r.Role == replica.Primary.String() && r.Epoch < top && r.Stale == "" {
			pi.Replicas[i].Stale = fmt.Sprintf("superseded by the primary of epoch %d", top)
		}
	}
}

// Partitions returns the replicated partitions in the yellow pages, sorted,
// each with its replicas' announced status (as of their last
// announcement) and what that is worth now: lapsed or superseded primary
// claims, replicas that said they lost contact.
func (c *Client) Partitions() []PartitionInfo {
	now := c.clock.Now()
	byKey := map[partKey]*PartitionInfo{}
	for _, e := range c.gossip.Snapshot() {
		for _, s := range e.Ann.Services {
			for _, r := range s.Replicas {
				k := partKey{s.Name, r.Partition}
				pi := byKey[k]
				if pi == nil {
					pi = &PartitionInfo{Service: s.Name, Partition: int(r.Partition), Level: int(r.Level), Linearizable: r.Linearizable}
					byKey[k] = pi
				}
				pi.Replicas = append(pi.Replicas, readReplica(now, e.Seen, e.Ann.NodeId, r))
			}
		}
	}
	out := make([]PartitionInfo, 0, len(byKey))
	for _, pi := range byKey {
		judge(pi)
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

// nodeClient is a connection to node, found by its id in the yellow pages
// (operator calls that must reach one particular node).
func (c *Client) nodeClient(node string) (pb.NodeClient, error) {
	var addr string
	for _, e := range c.gossip.Snapshot() {
		if e.Ann.NodeId == node {
			addr = e.Ann.RpcAddr
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("%w: node %q is not in the yellow pages", nerr.ErrNoReplica, node)
	}
	return c.conns.ClientFor(node, addr)
}

// Drain asks node to drain (an operator's certificate is needed): it
// answers once the node's primary roles are handed over, with the
// partitions it kept (no in-sync replica could take them), then the node
// finishes its calls in flight and stops.
func (c *Client) Drain(ctx context.Context, node string) ([]string, error) {
	cl, err := c.nodeClient(node)
	if err != nil {
		return nil, err
	}
	out, err := cl.Drain(ctx, &pb.DrainRequest{})
	if err != nil {
		return nil, transport.FromStatus(node, err)
	}
	return out.Kept, nil
}

// Promote asks node's replica of service's partition to become its
// primary and returns the replica's status after. Without force the
// replica calls an election that needs a majority of the partition's
// replicas: it may not win (the status then shows another role), and no
// acknowledged write is lost. With force it becomes primary at once: the
// operator's recovery when fewer than a majority survive (promote the one
// with the newest version; the others recover from it, except those whose
// logs now differ below their commit point: they report Diverged and serve
// nothing until rebuilt). Acknowledged writes it lacks are lost.
func (c *Client) Promote(ctx context.Context, node, service string, partition int, force bool) (ReplicaInfo, error) {
	cl, err := c.nodeClient(node)
	if err != nil {
		return ReplicaInfo{}, err
	}
	out, err := cl.Promote(ctx, &pb.PromoteRequest{Service: service, Partition: int32(partition), Force: force})
	if err != nil {
		return ReplicaInfo{}, transport.FromStatus(node, err)
	}
	return replicaInfo(node, out.Status), nil
}

// BackupInfo says what a partition's backup holds: every write up to LSN
// (whose entry had epoch LSNEpoch), taken at primary Node.
type BackupInfo struct {
	LSN, LSNEpoch uint64
	Node          string
}

// Backup streams a consistent snapshot of service's partition from node,
// its primary, to w (an operator's certificate is needed). An error
// wrapping ErrNoPrimary means node is not the primary; nothing was
// written then.
func (c *Client) Backup(ctx context.Context, node, service string, partition int, w io.Writer) (BackupInfo, error) {
	cl, err := c.nodeClient(node)
	if err != nil {
		return BackupInfo{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cl.Backup(ctx, &pb.BackupRequest{Service: service, Partition: int32(partition)})
	if err != nil {
		return BackupInfo{}, transport.FromStatus(node, err)
	}
	first, err := st.Recv()
	if err != nil {
		return BackupInfo{}, transport.FromStatus(node, err)
	}
	info := BackupInfo{LSN: first.Lsn, LSNEpoch: first.LsnEpoch, Node: first.Node}
	for {
		ch, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return info, nil
		}
		if err != nil {
			return info, transport.FromStatus(node, err)
		}
		if _, err := w.Write(ch.Data); err != nil {
			return info, err
		}
	}
}

// Debug streams one item of node's debug bundle to w (an operator's
// certificate is needed): status, config, metrics, logs, goroutine, heap,
// cpu (a profile of seconds), or a dashboard view ("dashboard/<view>").
func (c *Client) Debug(ctx context.Context, node, item string, seconds int, w io.Writer) error {
	cl, err := c.nodeClient(node)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cl.Debug(ctx, &pb.DebugRequest{Item: item, Seconds: uint32(max(seconds, 0))})
	if err != nil {
		return transport.FromStatus(node, err)
	}
	for {
		ch, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return transport.FromStatus(node, err)
		}
		if _, err := w.Write(ch.Data); err != nil {
			return err
		}
	}
}
