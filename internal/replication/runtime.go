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
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

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

// ControlSender is a Sender that can deliver a batch of control messages
// (no entries) on one of controlConns connections of their own to the
// node, apart from the one bulk data and calls share. Over TCP a lost
// segment stalls every call behind it on its connection until it is
// retransmitted (a tail-loss probe or a retransmission timeout: 200 ms
// and more, doubling if the copy is lost too); heartbeats spread over
// independent connections arrive while any one is unstalled, so a lossy
// link does not silence a live primary (issue 28). Without it the
// control lane uses Replicate.
type ControlSender interface {
	ReplicateControl(ctx context.Context, conn int, node, addr string, batch *pb.ReplicaBatch) error
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
	// Tracer, if set, traces the writes proposed here (trace.go); nil
	// costs nothing.
	Tracer trace.Tracer
	// Clock drives ticks, failure detection and every wait (default real).
	Clock clock.Clock
	// OnRoleChange, if set, is called from a partition's loop when its
	// replica's role, epoch or primary changes; it must not block. The node
	// announces itself at once, so clients find a new primary quickly.
	OnRoleChange func()
	// DiskReserve is the free space in DataDir's file system below which
	// the node refuses writes and hands over its primaries (default
	// DefaultDiskReserve; see storage.go). DiskCheckEvery is how often it
	// is measured (default 1s), FreeSpace how (default: FreeSpace, the
	// file system's available bytes).
	DiskReserve    uint64
	DiskCheckEvery time.Duration
	FreeSpace      func(dir string) (uint64, error)
	// RebuildCorrupt quarantines a replica whose write log is found
	// corrupt at open and rebuilds it from its peers, instead of
	// refusing to start (see corrupt.go).
	RebuildCorrupt bool
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
	// controlConns is how many control calls may be in flight to one node,
	// each on its own connection where the Sender is a ControlSender.
	controlConns = 3
	// deliverTimeout bounds one Replicate call of the control lane.
	deliverTimeout = 300 * time.Millisecond
	// bulkDeliverTimeout is the base bound of one bulk call (plus its
	// size at bulkBytesPerSecond). Giving up on a call does not unstall
	// its connection: on a lossy link the call waits for TCP to
	// retransmit a lost segment (200 ms and more, doubling when the copy
	// is lost too), and the next call would wait behind the same segment.
	// Cancelled, the batch may not arrive whole, and the follower then
	// refuses the entries after it as a gap until the primary resends
	// them all: cascades that cost a lossy link most of its writes (issue
	// 28). A dead peer refuses calls at once, and the control lane
	// detects a silent one, so waiting here delays nothing else.
	bulkDeliverTimeout = 2 * time.Second
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
	// defaultLease is replica.Config's default Lease.
	defaultLease = 400 * time.Millisecond
)

type partKey struct {
	service   string
	partition int32
}

// Runtime is a node's replication runtime.
type Runtime struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock

	// parts are the replicas hosted here: opened at Start, created when
	// an append names this node in its partition's replica set (a replica
	// added while serving), dropped when one learns it was removed.
	// specs are the registered partitions: those whose static replica set
	// names this node are hosted from the start, the others on standby
	// (hosted once named, or at Start if their data directory exists).
	// templates, per service, host partitions nobody registered here.
	pmu       sync.RWMutex
	parts     map[partKey]*part
	specs     map[partKey]Partition
	templates map[string]Partition
	joinMu    sync.Mutex // one replica created at a time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	det detector

	mu     sync.Mutex
	peers  map[string]*peerLanes
	addrs  map[string]string // last known RPC address per node (addrOf)
	resent resendCounter
	mem    releaser

	disk    storage
	corrupt corruptionCounter
	// transitions counts each partition's elections and step-downs here.
	transitions transitionCounter
	// held is the bytes of replication messages queued or in flight to
	// peers.
	held atomic.Int64
}

// HeldBytes is the bytes of replication messages the node holds now:
// queued or in flight to other nodes, and entries received but not yet
// taken by their partition's loop. The node's in-flight budget counts
// them beside its calls'.
func (rt *Runtime) HeldBytes() int64 {
	n := rt.held.Load()
	rt.pmu.RLock()
	defer rt.pmu.RUnlock()
	for _, p := range rt.parts {
		n += p.inboxHeld.Load()
	}
	return n
}

// New returns a runtime with no partitions; Register them, then Start.
func New(cfg Config) *Runtime {
	tuneOnce.Do(tuneCHeap)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DiskReserve == 0 {
		cfg.DiskReserve = DefaultDiskReserve
	}
	if cfg.DiskCheckEvery <= 0 {
		cfg.DiskCheckEvery = defaultDiskCheckEvery
	}
	if cfg.FreeSpace == nil {
		cfg.FreeSpace = FreeSpace
	}
	clk := clock.OrReal(cfg.Clock)
	rt := &Runtime{cfg: cfg, log: cfg.Logger, clock: clk, parts: map[partKey]*part{}, specs: map[partKey]Partition{},
		templates: map[string]Partition{}, peers: map[string]*peerLanes{}, addrs: map[string]string{}, det: newDetector(clk)}
	rt.disk.guard.reserve = cfg.DiskReserve
	return rt
}

// partDir is the directory of a partition's write log.
func (rt *Runtime) partDir(key partKey) string {
	return filepath.Join(rt.cfg.DataDir, key.service, strconv.Itoa(int(key.partition)))
}

// Register prepares replicas of ps (typically one service's partitions
// on this node); their loops start with Start. A partition whose static
// replica set does not name this node is on standby: hosted once a
// replica-set change names it. It registers all of them or, if one is
// invalid, none.
func (rt *Runtime) Register(ps ...Partition) error {
	for _, p := range ps {
		if _, err := rt.config(p, nil); err != nil {
			return err
		}
	}
	rt.pmu.Lock()
	defer rt.pmu.Unlock()
	for _, p := range ps {
		rt.specs[partKey{p.Service, p.Partition}] = p
		rt.templates[p.Service] = p
	}
	return nil
}

// config builds p's replica config with the replica set members (nil:
// the static one, which need not name this node).
func (rt *Runtime) config(p Partition, members []replica.Peer) (replica.Config, error) {
	r := p.Replication
	if r.Linearizable && r.Level == int(replica.Level1) {
		return replica.Config{}, fmt.Errorf("neptune: register %q: Replication.Linearizable needs level 2 or 3", p.Service)
	}
	cfg := replica.Config{ID: replica.ID(rt.cfg.Self), Level: replica.Level(r.Level), MinLive: r.MinLive,
		Heartbeat: r.Heartbeat, AckTimeout: r.AckTimeout, ElectionTimeout: r.ElectionTimeout,
		WriteWait: r.WriteWait, Staleness: r.Staleness, Lease: r.Lease, Replicas: members}
	if members == nil {
		cfg.Replicas = staticMembers(p)
		if !slices.ContainsFunc(cfg.Replicas, func(m replica.Peer) bool { return m.ID == cfg.ID }) {
			cfg.Replicas = append(cfg.Replicas, replica.Peer{ID: cfg.ID}) // (standby: only to validate the rest)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("neptune: register %q partition %d: %w", p.Service, p.Partition, err)
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = defaultAckTimeout
	}
	return cfg, nil
}

// staticMembers is p's replica set as its Replication declares it.
func staticMembers(p Partition) []replica.Peer {
	var ms []replica.Peer
	for _, s := range p.Replication.ReplicasOf(int(p.Partition)) {
		ms = append(ms, replica.Peer{ID: replica.ID(s.Node), Priority: s.Priority})
	}
	return ms
}

// open opens the replica of spec's partition here, from its write log:
// with the stored replica set, else join's (the set an append named this
// node in), else the static one. It returns nil, and keeps nothing open,
// if that set does not name this node (a replica removed, or standby) or,
// without join, if a standby partition has no data directory here.
func (rt *Runtime) open(spec Partition, join *replica.ConfState) (*part, error) {
	key := partKey{spec.Service, spec.Partition}
	self := replica.ID(rt.cfg.Self)
	static := staticMembers(spec)
	named := func(ms []replica.Peer) bool {
		return slices.ContainsFunc(ms, func(m replica.Peer) bool { return m.ID == self })
	}
	dir := rt.partDir(key)
	if _, err := os.Stat(dir); err != nil && join == nil && !named(static) {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("neptune: data dir: %w", err)
	}
	walOpts := wal.Options{Logger: rt.log.With("service", key.service, "partition", key.partition)}
	l, err := wal.Open(dir, walOpts)
	if errors.Is(err, wal.ErrCorrupt) {
		var rebuilt bool
		if rebuilt, err = rt.openCorrupt(key, err); rebuilt {
			if err = os.MkdirAll(dir, 0o755); err == nil {
				l, err = wal.Open(dir, walOpts)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("neptune: %s partition %d: %w", key.service, key.partition, err)
	}
	rt.reportDamage(key, l.Damage())
	fail := func(err error) (*part, error) {
		_ = l.Close()
		return nil, fmt.Errorf("neptune: %s partition %d: %w", key.service, key.partition, err)
	}
	rs, err := l.Restore()
	if err != nil {
		return fail(err)
	}
	if join != nil && (rs.ConfState == nil || join.LSN > rs.ConfState.LSN) {
		rs.ConfState = join
	}
	members := static
	if rs.ConfState != nil {
		members = rs.ConfState.Members
	}
	if !named(members) {
		_ = l.Close()
		return nil, nil
	}
	if rs, err = rt.seed(key, spec, l, rs); err != nil {
		return fail(err)
	}
	cfg, err := rt.config(spec, members)
	if err != nil {
		return fail(err)
	}
	p := &part{rt: rt, spec: spec, key: key, cfg: cfg,
		inbox: make(chan replica.Message, 4096), props: make(chan proposal, 1024),
		ops: make(chan func(time.Time), 16), done: make(chan struct{}), changed: make(chan struct{})}
	p.ask = p.current
	if p.core, err = replica.New(cfg, rs); err != nil {
		return fail(err)
	}
	recs, high, err := l.Dedup()
	if err != nil {
		return fail(err)
	}
	p.dedup = replica.NewDedupTable(0, recs, high)
	p.log = l
	p.pending = map[uint64]chan Result{}
	p.traced = map[uint64]*tracedWrite{}
	// Request ids must not repeat across restarts: old entries in the
	// log carry this replica's earlier ids.
	p.nextReq = uint64(rt.clock.Now().UnixNano())
	if full, _ := rt.disk.state(); full {
		p.core.SetStorageFull(rt.clock.Now(), true)
	}
	p.publish(p.core.Status())
	return p, nil
}

// Start opens every replica's log and starts its loop.
func (rt *Runtime) Start() error {
	rt.ctx, rt.cancel = context.WithCancel(context.Background())
	rt.checkDisk(rt.clock.Now())
	rt.pmu.Lock()
	defer rt.pmu.Unlock()
	for key, spec := range rt.specs {
		p, err := rt.open(spec, nil)
		if err != nil {
			for _, q := range rt.parts {
				_ = q.log.Close()
			}
			clear(rt.parts)
			return err
		}
		if p != nil {
			rt.parts[key] = p
		}
	}
	rt.seeded()
	rt.wg.Add(1)
	go func() { defer rt.wg.Done(); rt.probeLost(rt.ctx) }()
	rt.wg.Add(1)
	go func() { defer rt.wg.Done(); rt.releaseMemory(rt.ctx) }()
	rt.wg.Add(1)
	go func() { defer rt.wg.Done(); rt.watchDisk(rt.ctx) }()
	for _, p := range rt.parts {
		rt.startPart(p)
	}
	return nil
}

// startPart starts p's loop. A loop that ends because its replica was
// removed from the replica set closes the log and drops the replica: the
// node no longer announces or serves it. Its data directory stays (a
// removal that a new primary's log undoes finds it again).
func (rt *Runtime) startPart(p *part) {
	rt.wg.Add(2)
	go func() { defer rt.wg.Done(); p.keepBeats(rt.ctx) }()
	go func() {
		defer rt.wg.Done()
		removed, err := p.run(rt.ctx)
		if err != nil {
			rt.recoverPart(p, err)
			return
		}
		if !removed {
			return
		}
		rt.log.Info("replica removed from its partition's replica set: no longer hosted here (data kept)",
			"service", p.key.service, "partition", p.key.partition)
		rt.pmu.Lock()
		_ = p.log.Close()
		delete(rt.parts, p.key)
		rt.pmu.Unlock()
		rt.hostingChanged()
	}()
}

// join creates the replica of pm's partition when pm names this node in
// the replica set (a replica added while serving) and the node hosts the
// service; nil if it does not, or could not.
func (rt *Runtime) join(pm *pb.ReplicaMessage) *part {
	if !slices.ContainsFunc(pm.Members, func(m *pb.ReplicaPeer) bool { return m.Id == rt.cfg.Self }) {
		return nil
	}
	key := partKey{pm.Service, pm.Partition}
	rt.joinMu.Lock()
	defer rt.joinMu.Unlock()
	rt.pmu.RLock()
	spec, known := rt.specs[key]
	tmpl, hosted := rt.templates[pm.Service]
	_, exists := rt.parts[key]
	rt.pmu.RUnlock()
	if exists || !hosted || rt.ctx == nil || rt.ctx.Err() != nil {
		return nil
	}
	if !known {
		spec = tmpl
		spec.Partition = pm.Partition
	}
	p, err := rt.open(spec, &replica.ConfState{LSN: replica.LSN(pm.MembersLsn), Members: fromPBPeers(pm.Members)})
	if err != nil || p == nil {
		rt.log.Warn("cannot host a replica this node was added as", "service", pm.Service, "partition", pm.Partition, "err", err)
		return nil
	}
	rt.log.Info("hosting a replica this node was added as", "service", pm.Service, "partition", pm.Partition, "from", pm.From)
	rt.pmu.Lock()
	rt.parts[key] = p
	rt.startPart(p)
	rt.pmu.Unlock()
	rt.hostingChanged()
	return p
}

// hostingChanged tells the node that the replicas hosted here changed, so
// that it announces it at once (Config.OnRoleChange).
func (rt *Runtime) hostingChanged() {
	if f := rt.cfg.OnRoleChange; f != nil {
		f()
	}
}

// Stop stops the loops and the senders and closes the logs.
func (rt *Runtime) Stop() {
	if rt.cancel == nil {
		return
	}
	rt.joinMu.Lock() // no replica is created meanwhile
	rt.cancel()
	rt.joinMu.Unlock()
	rt.wg.Wait()
	rt.pmu.Lock()
	defer rt.pmu.Unlock()
	for _, p := range rt.parts {
		if p.log != nil {
			_ = p.log.Close()
		}
	}
}

func (rt *Runtime) part(service string, partition int32) (*part, error) {
	if p := rt.lookup(service, partition); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w %d of replicated service %q on node %s", nerr.ErrUnknownPartition, partition, service, rt.cfg.Self)
}

// lookup is the replica of the partition hosted here, or nil.
func (rt *Runtime) lookup(service string, partition int32) *part {
	rt.pmu.RLock()
	defer rt.pmu.RUnlock()
	return rt.parts[partKey{service, partition}]
}

// Hosts reports whether the replica of service's partition is hosted here.
func (rt *Runtime) Hosts(service string, partition int32) bool {
	return rt.lookup(service, partition) != nil
}

// Hosting lists the partitions of service whose replicas are hosted here
// now, in order: what the node announces and serves.
func (rt *Runtime) Hosting(service string) []int32 {
	rt.pmu.RLock()
	defer rt.pmu.RUnlock()
	var out []int32
	for k := range rt.parts {
		if k.service == service {
			out = append(out, k.partition)
		}
	}
	slices.Sort(out)
	return out
}
