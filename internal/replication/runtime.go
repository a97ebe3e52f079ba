// Package replication is the node's replication runtime (dissertation
// ch. 5): the shell around the pure core internal/replica. For every hosted
// replica of a replicated partition it runs one event loop that drives a
// replica.Replica over its pebble write log (internal/replica/wal), feeds
// it liveness from its own fast failure detector, exchanges its messages
// with the other replicas through the Replicate RPC (batched per
// destination node by one sender goroutine each) and executes committed
// writes through the service's workers. It also serves calls on replicated
// partitions (writes through the replica, forwarded to the primary if
// need be; reads here if this replica may serve them).
//
// It needs three small things from its node: the yellow pages (Directory),
// a way to reach other nodes (Sender) and, per partition, a way to run a
// write's handler (Executor).
package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/replica/wal"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Directory is the yellow pages as replication reads them.
type Directory interface {
	// RPCAddr is node's RPC address, or "" if the yellow pages do not
	// list it.
	RPCAddr(node string) string
	// Hosts lists the live nodes that announce service's partition.
	Hosts(service string, partition int32) []string
}

// Sender carries replication traffic to node at its RPC address addr.
// Both are given so that a secured connection admits only the server whose
// certificate names node: an address now held by another process never
// receives node's replication messages.
type Sender interface {
	// Replicate delivers one batch of replication messages.
	Replicate(ctx context.Context, node, addr string, batch *pb.ReplicaBatch) error
	// Forward sends a call on to another replica (the primary).
	Forward(ctx context.Context, node, addr string, in *pb.CallRequest) (*pb.CallResponse, error)
}

// Result is a handler's outcome for one write.
type Result struct {
	Resp *service.Response
	Err  error
}

// Executor runs a committed write's handler on the service's workers.
type Executor interface {
	// Execute runs req's handler and returns its outcome; an error means
	// the workers did not run it (queue full, cancelled), and the runtime
	// offers the write again: a committed write cannot be skipped.
	Execute(ctx context.Context, req *service.Request) (Result, error)
}

// Config configures a Runtime.
type Config struct {
	// Self is this node's id, as the partitions' replica lists name it.
	Self string
	// DataDir holds one write log per replica, DataDir/service/partition.
	DataDir   string
	Directory Directory
	Sender    Sender
	Logger    *slog.Logger
	// Clock drives ticks, failure detection and every wait (default real).
	Clock clock.Clock
	// OnRoleChange, if set, is called from a partition's loop when its
	// replica's role, epoch or primary changes; it must not block. The node
	// announces itself at once, so clients find a new primary quickly.
	OnRoleChange func()
}

// Partition is one hosted replica of a replicated partition.
type Partition struct {
	Service     string
	Partition   int32
	Replication *service.Replication
	// Check is the service's CHECK callback (nil: reissue every write the
	// log cannot prove applied).
	Check    service.CheckFunc
	Executor Executor
	// Snapshots is the service's snapshot pair (nil: a replica that
	// cannot catch up from the log stays recovering; see snapshot.go).
	Snapshots service.Snapshotter
}

const (
	// tickEvery is how often each partition loop ticks its replica.
	tickEvery = 10 * time.Millisecond
	// suspectFor is how long a peer that failed suspectAfter calls in a
	// row, or a primary silent for AckTimeout, counts as dead unless heard
	// from.
	suspectFor = time.Second
	// suspectAfter failed calls in a row make a peer suspect: one call that
	// timed out on a busy peer used to start an election nobody needed; a
	// killed peer refuses the next call at once.
	suspectAfter = 2
	// peerQueueLimit and peerQueueBytes bound the messages queued to one
	// node; older ones are dropped (the protocol retransmits). A message
	// may carry MaxBatch entries, so the count alone bounds no memory.
	peerQueueLimit = 4096
	peerQueueBytes = 32 << 20
	// batchBytes caps one Replicate call, well under gRPC's default
	// 4 MiB receive limit, which would refuse a whole backlog at once.
	batchBytes = 1 << 20
	// deliverTimeout bounds one Replicate call.
	deliverTimeout = 300 * time.Millisecond
	// checkRetry is the pause between failed CHECK calls, applyRetry
	// between offers of a write the workers refused.
	checkRetry = 50 * time.Millisecond
	applyRetry = time.Millisecond
	// maxApplyWait bounds how long a read waits for this replica to be
	// able to serve it (a primary to get its lease or apply what it
	// committed) when the partition sets no WriteWait.
	maxApplyWait = time.Second
	// defaultAckTimeout is replica's default, which the failure detector
	// needs to know.
	defaultAckTimeout = 500 * time.Millisecond
)

// errNoReplicaSet reports a registered partition with no replica here.
var errNoReplicaSet = errors.New("neptune: partition has no replica on this node")

type partKey struct {
	service   string
	partition int32
}

// Runtime is a node's replication runtime.
type Runtime struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock
	parts map[partKey]*part // fixed after Register

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	det detector

	mu     sync.Mutex
	peers  map[string]*peerLanes
	addrs  map[string]string // last known RPC address per node (addrOf)
	resent resendCounter
}

// New returns a runtime with no partitions; Register them, then Start.
func New(cfg Config) *Runtime {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	clk := clock.OrReal(cfg.Clock)
	return &Runtime{cfg: cfg, log: cfg.Logger, clock: clk, parts: map[partKey]*part{}, peers: map[string]*peerLanes{}, addrs: map[string]string{},
		det: newDetector(clk)}
}

// Register prepares replicas of ps (typically one service's partitions
// on this node); their loops start with Start. It registers all of them or,
// if one is invalid, none.
func (rt *Runtime) Register(ps ...Partition) error {
	parts := make([]*part, 0, len(ps))
	for _, p := range ps {
		pt, err := rt.prepare(p)
		if err != nil {
			return err
		}
		parts = append(parts, pt)
	}
	for _, pt := range parts {
		rt.parts[pt.key] = pt
	}
	return nil
}

// prepare checks p's replica set and builds its replica's config.
func (rt *Runtime) prepare(p Partition) (*part, error) {
	r := p.Replication
	specs := r.ReplicasOf(int(p.Partition))
	if !slices.ContainsFunc(specs, func(s service.ReplicaSpec) bool { return s.Node == rt.cfg.Self }) {
		return nil, fmt.Errorf("neptune: register %q partition %d: %w %q (replicas: %v)", p.Service, p.Partition, errNoReplicaSet, rt.cfg.Self, specs)
	}
	if r.Linearizable && r.Level == int(replica.Level1) {
		return nil, fmt.Errorf("neptune: register %q: Replication.Linearizable needs level 2 or 3", p.Service)
	}
	cfg := replica.Config{ID: replica.ID(rt.cfg.Self), Level: replica.Level(r.Level), MinLive: r.MinLive,
		Heartbeat: r.Heartbeat, AckTimeout: r.AckTimeout, ElectionTimeout: r.ElectionTimeout,
		WriteWait: r.WriteWait, Staleness: r.Staleness, Lease: r.Lease}
	for _, s := range specs {
		cfg.Replicas = append(cfg.Replicas, replica.Peer{ID: replica.ID(s.Node), Priority: s.Priority})
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("neptune: register %q partition %d: %w", p.Service, p.Partition, err)
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = defaultAckTimeout
	}
	pt := &part{rt: rt, spec: p, key: partKey{p.Service, p.Partition}, cfg: cfg,
		inbox: make(chan replica.Message, 4096), props: make(chan proposal, 1024),
		ops: make(chan func(time.Time), 16), done: make(chan struct{}), changed: make(chan struct{})}
	pt.ask = pt.current
	// Calls may arrive before Start finishes: they see a recovering replica.
	pt.status.Store(&replica.Status{ID: cfg.ID, Role: replica.Recovering, Phase: replica.PhaseCheck})
	return pt, nil
}

// Start opens every replica's log and starts its loop.
func (rt *Runtime) Start() error {
	rt.ctx, rt.cancel = context.WithCancel(context.Background())
	for _, p := range rt.parts {
		dir := filepath.Join(rt.cfg.DataDir, p.key.service, strconv.Itoa(int(p.key.partition)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("neptune: data dir: %w", err)
		}
		l, err := wal.Open(dir)
		if err != nil {
			return fmt.Errorf("neptune: %s partition %d: %w", p.key.service, p.key.partition, err)
		}
		rs, err := l.Restore()
		if err == nil {
			p.core, err = replica.New(p.cfg, rs)
		}
		if err == nil {
			var recs []replica.DedupRecord
			var high int64
			if recs, high, err = l.Dedup(); err == nil {
				p.dedup = replica.NewDedupTable(0, recs, high)
			}
		}
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("neptune: %s partition %d: %w", p.key.service, p.key.partition, err)
		}
		p.log = l
		p.pending = map[uint64]chan Result{}
		// Request ids must not repeat across restarts: old entries in the
		// log carry this replica's earlier ids.
		p.nextReq = uint64(rt.clock.Now().UnixNano())
		p.publish(p.core.Status())
	}
	rt.wg.Add(1)
	go func() { defer rt.wg.Done(); rt.probeLost(rt.ctx) }()
	for _, p := range rt.parts {
		rt.wg.Add(1)
		go func() { defer rt.wg.Done(); p.run(rt.ctx) }()
		rt.wg.Add(1)
		go func() { defer rt.wg.Done(); p.keepBeats(rt.ctx) }()
	}
	return nil
}

// Stop stops the loops and the senders and closes the logs.
func (rt *Runtime) Stop() {
	if rt.cancel == nil {
		return
	}
	rt.cancel()
	rt.wg.Wait()
	for _, p := range rt.parts {
		if p.log != nil {
			_ = p.log.Close()
		}
	}
}

func (rt *Runtime) part(service string, partition int32) (*part, error) {
	if p, ok := rt.parts[partKey{service, partition}]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w %d of replicated service %q on node %s", nerr.ErrUnknownPartition, partition, service, rt.cfg.Self)
}
