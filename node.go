package neptune

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/node"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/placement"
)

// NodeConfig configures a node. Zero fields take the documented defaults.
type NodeConfig struct {
	// ID names the node; unique in the cluster. Required.
	ID string
	// Host is the address every listener binds to: an IP, 0.0.0.0 or ::
	// for every interface, or a host name. Default 127.0.0.1.
	Host string
	// Advertise is the host the node tells others to dial for each of its
	// listeners (in containers: the service or pod name). Default: Host
	// if it names one address, else the local address on the route to the
	// first seed, else the first address of an interface that is up. An
	// address no other host can dial (0.0.0.0, ::) is refused at Start.
	Advertise string
	// GossipPort, RPCPort and PollPort are the memberlist, gRPC and UDP
	// load-poll ports; 0 picks a free port.
	GossipPort, RPCPort, PollPort int
	// MetricsAddr ("host:port") serves Prometheus /metrics; empty disables.
	MetricsAddr string
	// Zone is the node's failure domain (a rack, a data centre), announced
	// in the yellow pages: replica placement (internal/placement) spreads
	// a partition's replicas across zones. Optional.
	Zone string
	// Pprof also serves net/http/pprof under /debug/pprof/ on MetricsAddr,
	// for profiling a live node; off by default since it exposes internals.
	Pprof bool
	// Join lists gossip addresses ("host:port") of existing nodes.
	Join []string
	// JoinTimeout bounds how long Start keeps trying the Join addresses,
	// pausing with backoff (0: 10 s; negative: until Start's context
	// ends, as `neptune node` does by default). A Join address that is a
	// host name stands for every address it resolves to, looked up anew
	// on each try.
	JoinTimeout time.Duration
	// DrainTimeout bounds Drain: handing the primary roles over (at most
	// half of it), then the calls in flight (default 10 s).
	DrainTimeout time.Duration
	// AnnounceInterval and AnnounceTTL control the yellow pages' soft
	// state: refresh every 1 s, expire after 5 s (the paper's values).
	AnnounceInterval time.Duration
	AnnounceTTL      time.Duration
	// Balance selects the load-balancing policy of the node's own client.
	Balance Balancing
	// Registerer receives the node's metrics (and its client's); nil
	// creates a private registry. /metrics serves it if it is also a
	// prometheus.Gatherer (a *prometheus.Registry is), else a private
	// registry that receives every metric too. Metric names are fixed, so
	// two nodes cannot share one registry as it is: NewNode or Start
	// fails naming the metric. Wrap a shared one per node with
	// prometheus.WrapRegistererWith(prometheus.Labels{"node": id}, reg).
	Registerer prometheus.Registerer
	// Logger receives the node's logs; every line carries the node id,
	// and a call's lines its request id (request_id).
	Logger *slog.Logger
	// TracerProvider receives the node's OpenTelemetry spans (the RPC,
	// the wait in the service's queue, replication's append, replicate
	// and commit, the handler), children of the caller's by the W3C trace
	// context each call carries; nil turns tracing off, at no cost.
	TracerProvider trace.TracerProvider
	// DataDir holds the write logs of replicated partitions (one pebble
	// store per partition replica under DataDir/service/partition). It
	// records the cluster and node id it belongs to (neptune-identity.json)
	// and a start refuses a directory of another node or cluster.
	DataDir string
	// Security is the node's certificate directory and gossip keyring, or
	// an explicit Insecure; the zero value is refused (see Security).
	Security Security
	// Cluster names the cluster. A node refuses to join members of
	// another cluster and a data directory of one, and it is the gossip
	// label. A node has one cluster name: Security.Cluster, if also set,
	// must be the same (either alone sets both), and a secured node's CA
	// must record that name (`neptune tls ca create --cluster`), else
	// NewNode fails naming both. Default: the name the CA records, or
	// "neptune" for an insecure node.
	Cluster string
	// MaxMessageBytes bounds every request and response body the node
	// accepts or returns (default 16 MiB, at most 64 MiB): a larger one
	// gets ErrTooLarge and never runs or reaches the write log.
	MaxMessageBytes int
	// MaxInflightBytes bounds the request bytes of the calls the node
	// holds at once (default 64 MiB, at least MaxMessageBytes). A call
	// beyond it is refused with ErrOverloaded (retryable: it never ran)
	// as its headers arrive, before its body is read; see
	// docs/architecture/identity.md ("Request limits").
	MaxInflightBytes int64
	// MaxAggregateDeadline bounds an aggregation request's deadline (and
	// its reductions' grace) that the node accepts, default 1 minute;
	// MaxAggregateParticipants its participants, default 4096. A request
	// over either is refused, naming the limit, before anything runs: a
	// caller cannot make the node hold work for as long as it asks.
	MaxAggregateDeadline     time.Duration
	MaxAggregateParticipants int
	// Placement tunes automatic replica placement (see Placement).
	Placement Placement
	// Storage tunes how the node treats a full or damaged data directory
	// (see Storage).
	Storage Storage
}

// Storage tunes how a node treats its data directory's faults (issue 28).
// Below Reserve free bytes the node logs an error naming the directory
// and its free space, hands its primaries over, and refuses writes with a
// retryable ErrNoPrimary (never executed); reads go on. Once twice the
// reserve is free, writes resume by themselves. A write log found corrupt
// at start is logged, counted (neptune_storage_corruption_total) and the
// node refuses to start, naming `neptune partition rebuild`; with
// RebuildCorrupt it quarantines the replica's directory instead and
// rebuilds it from its peers.
type Storage struct {
	// Reserve is the free space, in bytes, below which the node refuses
	// writes (default 64 MiB).
	Reserve uint64
	// RebuildCorrupt quarantines a corrupt replica and rebuilds it from
	// its peers instead of refusing to start.
	RebuildCorrupt bool
}

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

// Validate reports the first invalid field by name.
func (c NodeConfig) Validate() error {
	_, err := c.internal()
	return err
}

// internal is the node runtime's config for c.
func (c NodeConfig) internal() (node.Config, error) {
	sec, err := c.Security.config("NodeConfig.Security", pki.Identity{Role: pki.RoleNode, Name: c.ID})
	if err != nil {
		return node.Config{}, err
	}
	cfg := node.Config{
		ID: c.ID, Host: c.Host, Advertise: c.Advertise, JoinTimeout: c.JoinTimeout, DrainTimeout: c.DrainTimeout, GossipPort: c.GossipPort, RPCPort: c.RPCPort, PollPort: c.PollPort,
		MetricsAddr: c.MetricsAddr, Zone: c.Zone, Pprof: c.Pprof, Join: c.Join,
		AnnounceInterval: c.AnnounceInterval, AnnounceTTL: c.AnnounceTTL,
		Balance: c.Balance, Registerer: c.Registerer, Logger: c.Logger, TracerProvider: c.TracerProvider, DataDir: c.DataDir, Security: sec,
		Cluster: c.Cluster, MaxMessageBytes: c.MaxMessageBytes, MaxInflightBytes: c.MaxInflightBytes,
		MaxAggregateDeadline: c.MaxAggregateDeadline, MaxAggregateParticipants: c.MaxAggregateParticipants,
		Placement:   c.Placement,
		DiskReserve: c.Storage.Reserve, RebuildCorrupt: c.Storage.RebuildCorrupt,
	}
	return cfg, cfg.Validate()
}

// Balancing selects and tunes the load-balancing policy a client uses to
// pick a replica. The zero value is the default: prequal, probing 6
// replicas (ProbeSize), reusing answers for 5 ms (ReuseWindow) and
// discarding those slower than 10 ms (Discard; negative waits for every
// answer, up to a second); zero fields take their defaults. Policy is one
// of BalancingPolicies(); PollSize is how many replicas "polling" asks
// (default 3); LoadBound how far above the mean "affinity" lets a key's
// replica load up before the key spills (default 2). The other fields
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
	ic, err := cfg.internal()
	if err != nil {
		return nil, err
	}
	n, err := node.New(ic)
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
