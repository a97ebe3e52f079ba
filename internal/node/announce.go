package node

import (
	"context"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/hostaddr"
	"github.com/neptune-cluster/neptune/internal/replication"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// announcement describes what this node hosts, for the yellow pages:
// each service's partitions, its method table (callers take a method's
// mode from it) and its replicas' status.
func (n *Node) announcement() *pb.Announcement {
	a := &pb.Announcement{RpcAddr: hostaddr.Join(n.adv, n.rpcLn.Addr().String()), PollAddr: hostaddr.Join(n.adv, n.polls.Addr()),
		Zone: n.cfg.Zone, PlacementOff: n.placementOff.Load()}
	if m := n.MetricsAddr(); m != "" {
		a.MetricsAddr = hostaddr.Join(n.adv, m)
	}
	for _, name := range n.serviceNames() {
		h := n.services[name]
		hs := &pb.HostedService{Name: name, Partitions: n.hostedPartitions(h)}
		if h.svc.Replication != nil && n.repl != nil {
			hs.Replicas = n.repl.Status(name, hs.Partitions) // membership sets lease_valid_ms
		}
		for _, m := range h.svc.Methods {
			hs.Methods = append(hs.Methods, &pb.MethodInfo{Name: m.Name, Mode: pb.Mode(m.Mode), Stream: m.Stream != nil})
		}
		a.Services = append(a.Services, hs)
	}
	return a
}

// load answers load polls: the load index a new request of class would see
// (dispatch.Pool.LoadFor).
func (n *Node) load(service string, partition int32, class string) (int, bool) {
	h, ok := n.services[service]
	if !ok || !n.hostsPartition(h, partition) {
		return 0, false
	}
	return h.pool.LoadFor(class), true
}

// loadChanged is every pool's OnChange: a request took a slot, queued or
// left, so the poll server pushes the loads that changed to subscribed
// clients. It never blocks (PollServer.Notify).
func (n *Node) loadChanged() {
	if s := n.pushes.Load(); s != nil {
		s.Notify()
	}
}

// pollVersion answers the replication part of a load poll.
func (n *Node) pollVersion(service string, partition int32) transport.Version {
	if n.repl == nil {
		return transport.Version{}
	}
	return n.repl.PollVersion(service, partition)
}

// aggWork answers the aggregation part of a load poll: the service's
// ledger and worker count.
func (n *Node) aggWork(service string) (transport.Work, bool) {
	h, ok := n.services[service]
	if !ok || h.ledger == nil {
		return transport.Work{}, false
	}
	return transport.Work{Pending: h.ledger.Pending(), Capacity: h.pool.Workers()}, true
}

// peers is the node as the replication runtime sees it: the yellow pages
// (replication.Directory) and connections to other nodes
// (replication.Sender). It reads the node's client, which exists once the
// runtime runs.
type peers Node

// RPCAddr finds a node's RPC address in the yellow pages.
func (p *peers) RPCAddr(node string) string {
	for _, e := range p.client.Gossip().Snapshot() {
		if e.Ann.NodeId == node {
			return e.Ann.RpcAddr
		}
	}
	return ""
}

// Hosts lists the live nodes announcing service's partition.
func (p *peers) Hosts(service string, partition int32) []string {
	look := p.client.Gossip().Replicas(service, partition)
	ids := make([]string, len(look.Replicas))
	for i, r := range look.Replicas {
		ids[i] = r.Node
	}
	return ids
}

// Replicate and Forward dial node by its id: with mutual TLS only a server
// whose certificate names node is admitted.
func (p *peers) Replicate(ctx context.Context, node, addr string, batch *pb.ReplicaBatch) error {
	cl, err := p.client.Conns().ClientFor(node, addr)
	if err != nil {
		return err
	}
	_, err = cl.Replicate(ctx, batch)
	return err
}

// ReplicateControl delivers a batch of control messages on control
// connection conn to node (replication.ControlSender): lanes 1.. of the
// node's connections, apart from the shared one.
func (p *peers) ReplicateControl(ctx context.Context, conn int, node, addr string, batch *pb.ReplicaBatch) error {
	cl, err := p.client.Conns().ClientOnLane(node, addr, 1+conn)
	if err != nil {
		return err
	}
	_, err = cl.Replicate(ctx, batch)
	return err
}

// OpenSnapshot starts a snapshot stream to node (replication.SnapshotSender).
func (p *peers) OpenSnapshot(ctx context.Context, node, addr string) (replication.SnapshotStream, error) {
	cl, err := p.client.Conns().ClientFor(node, addr)
	if err != nil {
		return nil, err
	}
	return cl.InstallSnapshot(ctx)
}

func (p *peers) Forward(ctx context.Context, node, addr string, in *pb.CallRequest) (*pb.CallResponse, error) {
	cl, err := p.client.Conns().ClientFor(node, addr)
	if err != nil {
		return nil, err
	}
	return cl.Call(ctx, in)
}

// hostedPartitions are the partitions of h hosted here now: a replicated
// service's are those whose replicas the replication runtime hosts (its
// replica sets change while serving), another's those registered.
func (n *Node) hostedPartitions(h *hosted) []int32 {
	if h.svc.Replication != nil && n.repl != nil {
		return n.repl.Hosting(h.svc.Name)
	}
	return h.partitions
}

// hostsPartition reports whether partition of h is hosted here now.
func (n *Node) hostsPartition(h *hosted, partition int32) bool {
	if h.svc.Replication != nil && n.repl != nil {
		return n.repl.Hosts(h.svc.Name, partition)
	}
	return slices.Contains(h.partitions, partition)
}

// refreshInterval is how often this node refreshes its announcement to
// every member now (it grows with the cluster), the announce interval
// before the node has joined.
func (n *Node) refreshInterval() time.Duration {
	if c := n.dash.client.Load(); c != nil {
		return c.Gossip().RefreshInterval()
	}
	return n.cfg.AnnounceInterval
}
