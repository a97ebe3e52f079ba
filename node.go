package neptune

import (
	"context"
	"slices"
	"sync"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/node"
	"github.com/neptune-cluster/neptune/internal/placement"
)

// NodeConfig configures a node; zero fields take the documented
// defaults, and Validate reports the first invalid field by name. Its
// fields: ID (required), Host, Advertise, GossipPort, RPCPort, PollPort,
// MetricsAddr, Zone, Pprof, Join, JoinTimeout, DrainTimeout,
// AnnounceInterval and AnnounceTTL (1 s and 5 s), Balance (see
// Balancing) and ServiceBalance (per-service overrides, as
// ClientConfig's), Registerer, Logger, TracerProvider, DataDir, Security
// (required: material or Insecure), Cluster, MaxMessageBytes (16 MiB),
// MaxInflightBytes (64 MiB), MaxAggregateDeadline (1 min),
// MaxAggregateParticipants (4096), Placement (see Placement) and Storage
// (see Storage); `go doc github.com/neptune-cluster/neptune/internal/config.Node`
// documents each.
type NodeConfig = config.Node

// Storage tunes how a node treats its data directory's faults (issue 28).
// Below Reserve free bytes (default 64 MiB) the node logs an error naming
// the directory and its free space, hands its primaries over, and refuses
// writes with a retryable ErrNoPrimary (never executed); reads go on.
// Once twice the reserve is free, writes resume by themselves. A write
// log found corrupt at start is logged, counted
// (neptune_storage_corruption_total) and the node refuses to start,
// naming `neptune partition rebuild`; with RebuildCorrupt it quarantines
// the replica's directory instead and rebuilds it from its peers.
type Storage = config.Storage

// DefaultMaxInflightBytes is NodeConfig.MaxInflightBytes's default.
const DefaultMaxInflightBytes = nerr.DefaultMaxInflightBytes

// Placement tunes automatic replica placement of replicated services
// (issue 17). One node at a time (the live node with the lowest id)
// replaces the replicas of a node down for longer than Grace (default 5
// minutes) elsewhere, spreading a partition's replicas across zones
// (NodeConfig.Zone), and, when nodes join, moves replicas and primaries
// until every node holds within one of every other, at most MaxInFlight
// moves at once (default 1) and one rebalancing step per Interval
// (default 30 s). Off on a node keeps it from acting (set it on every
// node to turn placement off). Every change is an ordinary replica-set
// change (`neptune partition add|remove`). Set it alike on every node.
type Placement = placement.Config

// Balancing selects and tunes the load-balancing policy a client uses to
// pick a replica. The zero value is the default: prequal, probing 6
// replicas (ProbeSize), reusing answers for 5 ms (ReuseWindow) and
// discarding those slower than 10 ms (Discard; negative waits for every
// answer, up to a second); zero fields take their defaults. Policy is one
// of BalancingPolicies(); PollSize is how many replicas "polling" asks
// (default 3); LoadBound how far above the mean "affinity" lets a key's
// replica load up before the key spills (default 1.25, Envoy's rule). The other fields
// tune the async, push and broadcast policies (see the policies' notes in
// docs/architecture/balance.md).
type Balancing = balance.Config

// BalancingPolicies lists the names Balancing.Policy accepts.
func BalancingPolicies() []string { return slices.Clone(balance.Names) }

// Node hosts service partitions and serves calls to them. It is also a
// full client of the cluster (Client), as every node is functionally the
// same.
type Node struct {
	n *node.Node

	mu     sync.Mutex
	client *Client
}

// NewNode creates a node; Register services, then Start it.
func NewNode(cfg NodeConfig) (*Node, error) {
	n, err := node.New(node.Config{Node: cfg})
	if err != nil {
		return nil, err
	}
	return &Node{n: n}, nil
}

// Register hosts svc's partitions on this node. Call it before Start. A
// replicated service's partitions must each list this node among their
// replicas (Replication.PartitionsOn tells which).
func (n *Node) Register(svc Service, partitions ...int) error {
	return n.n.Register(svc, partitions...)
}

// Start opens the node's listeners, joins the cluster and starts
// announcing what it hosts.
func (n *Node) Start(ctx context.Context) error { return n.n.Start(ctx) }

// Client returns the node's own client, which shares its yellow pages
// (nil before Start).
func (n *Node) Client() *Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.client == nil {
		if c := n.n.Client(); c != nil {
			n.client = &Client{c: c}
		}
	}
	return n.client
}

// GossipAddr is the address other nodes and clients join.
func (n *Node) GossipAddr() string { return n.n.GossipAddr() }

// RPCAddr is the gRPC address calls arrive on.
func (n *Node) RPCAddr() string { return n.n.RPCAddr() }

// MetricsAddr is where /metrics is served, or "".
func (n *Node) MetricsAddr() string { return n.n.MetricsAddr() }

// DefaultDrainTimeout bounds a drain unless NodeConfig.DrainTimeout says.
const DefaultDrainTimeout = node.DefaultDrainTimeout

// Drain stops the node without failing a call: it reports itself not
// ready (/readyz, grpc.health.v1), hands every primary role it holds to
// an in-sync replica, leaves the gossip so clients stop choosing it,
// finishes the calls in flight, then closes, all within
// NodeConfig.DrainTimeout (default 10 s) or ctx. It returns the
// partitions it still led at the end: those had no in-sync replica to
// take over, and elect a primary once the node is gone. `neptune node`
// drains on SIGTERM and SIGINT.
func (n *Node) Drain(ctx context.Context) []string { return n.n.Drain(ctx) }

// SetPlacement changes the node's placement settings while it runs (what
// SIGHUP does to `neptune node` with a changed placement block): Off,
// Grace, Interval, MaxInFlight. Changes under way go on.
func (n *Node) SetPlacement(p Placement) error { return n.n.SetPlacement(p) }

// Done is closed once the node has stopped: Close, Drain, or a drain an
// operator asked for (`neptune node drain`, Client.Drain).
func (n *Node) Done() <-chan struct{} { return n.n.Done() }

// ReloadSecurity re-reads the node's certificate, key and keyring files
// now (what SIGHUP does to `neptune node`); the node also re-reads them on
// its own, certificates at most every 10 s and the keyring every 5 s. A
// file that fails to load leaves the node's material as it was.
func (n *Node) ReloadSecurity() error { return n.n.ReloadSecurity() }

// Close leaves the cluster, stops serving and fails queued requests. It is
// safe to call more than once.
func (n *Node) Close() error { return n.n.Close() }
