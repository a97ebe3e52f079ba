// Package node is the node runtime: it hosts service partitions (a
// dispatch pool per service, charged as the service's Accounting says),
// serves them over gRPC (the NodeServer), answers load polls, announces
// what it hosts to the yellow pages, serves /metrics and wires the
// replication runtime (internal/replication) and the aggregation runtime
// (internal/aggregation) in. Every node embeds a client (internal/client)
// sharing its yellow pages. The root package's Node wraps it.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/neptune-cluster/neptune/internal/aggregation"
	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/dispatch"
	"github.com/neptune-cluster/neptune/internal/hostaddr"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/metrics"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/obs"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/rebalance"
	"github.com/neptune-cluster/neptune/internal/replication"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Config configures a node: what a program sets (config.Node,
// neptune.NodeConfig, validated by its Validate, whose errors name
// NodeConfig's fields) and the clock, which only tests set.
type Config struct {
	config.Node
	// Clock drives every timer of the node, its client and its runtimes
	// (default real).
	Clock clock.Clock
}

func (c Config) withDefaults() Config {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.AnnounceInterval == 0 {
		c.AnnounceInterval = membership.DefaultAnnounceInterval
	}
	if c.AnnounceTTL == 0 {
		c.AnnounceTTL = membership.DefaultTTL
	}
	c.Balance = c.Balance.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Logger = obs.Logger(c.Logger)
	c.Clock = clock.OrReal(c.Clock)
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = nerr.DefaultMaxMessageBytes
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = nerr.DefaultMaxInflightBytes
	}
	return c
}

// clusterName is the node's one cluster name: the configured one (""
// if none), which a secured node's CA must agree with.
func clusterName(configured string, m *security.Material) (string, error) {
	if m.Insecure() {
		if configured == "" {
			return DefaultCluster, nil
		}
		return configured, nil
	}
	ca := m.TLS.Cluster()
	if configured != "" && configured != ca {
		return "", fmt.Errorf("neptune: NodeConfig.Cluster (or NodeConfig.Security.Cluster) %q disagrees with %q, the cluster name of the CA in NodeConfig.Security.Dir: a node's certificate authority is its cluster's", configured, ca)
	}
	return ca, nil
}

// Node hosts service partitions and serves calls to them. It is also a
// full client of the cluster, as every node is functionally the same.
type Node struct {
	cfg     Config
	log     *slog.Logger
	tracer  trace.Tracer // nil: tracing off
	clock   clock.Clock
	reg     metrics.Registries
	metrics *serverMetrics
	// sec is the node's security material, shared with its client.
	sec *security.Material
	// registered are the collectors Start registered, for Close.
	registered []prometheus.Collector

	// logs keeps the node's recent log lines for its debug bundle
	// (debug.go); startedAt is when it was created.
	logs      *logRing
	startedAt time.Time

	mu        sync.Mutex
	services  map[string]*hosted // fixed after Start
	started   bool
	closeOnce sync.Once

	grpc  *grpc.Server
	rpcLn net.Listener
	// adv is the host the node's addresses are announced with.
	adv string
	// health answers grpc.health.v1 (health.go); stopHealth ends its
	// updates; draining makes the node not ready; healthNow brings the
	// statuses up to date before the next tick.
	health     *health.Server
	stopHealth context.CancelFunc
	draining   atomic.Bool
	healthNow  chan struct{}
	// done is closed when the node has stopped.
	done chan struct{}
	// placeMu guards placer, which SetPlacement may start late;
	// placementOff is what the node announces.
	placeMu      sync.Mutex
	placementOff atomic.Bool
	polls        *transport.PollServer
	// pushes is polls once it listens: the pools' OnChange (loadChanged)
	// reads it from request goroutines, which start before it is set.
	pushes  atomic.Pointer[transport.PollServer]
	client  *client.Client
	repl    *replication.Runtime  // nil without replicated services
	placer  *rebalance.Controller // nil without replicated services or with placement off
	agg     *aggregation.Server
	httpSrv *http.Server
	httpLn  net.Listener
	dash    dashSource // the dashboard's view of the node (dashboard.go)
	// acct is the Gage accounting cycle (usage.go); acctStop ends it.
	acct     *accounting
	acctStop chan struct{}
	// inflight is the budget of request bytes in flight
	// (MaxInflightBytes), enforced by the gRPC server.
	inflight *transport.Inflight
}

// New creates a node; Register services, then Start it.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	logs := newLogRing(DebugLogBytes)
	n := &Node{
		cfg:       cfg,
		logs:      logs,
		startedAt: time.Now(),
		log: slog.New(teeHandler{cfg.Logger.Handler(), slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})}).
			With("node", cfg.ID),
		tracer:    obs.Tracer(cfg.TracerProvider),
		clock:     cfg.Clock,
		reg:       metrics.For(cfg.Registerer),
		services:  map[string]*hosted{},
		acct:      newAccounting(cfg.Clock, DefaultAccountingCycle),
		acctStop:  make(chan struct{}),
		healthNow: make(chan struct{}, 1),
		done:      make(chan struct{}),
		inflight:  transport.NewInflight(cfg.ID, cfg.MaxInflightBytes, cfg.MaxMessageBytes+nerr.WireOverhead),
	}
	sc, err := security.FromConfig(cfg.Security, "NodeConfig.Security", pki.Identity{Role: pki.RoleNode, Name: cfg.ID})
	if err != nil {
		return nil, err
	}
	sc.Logger, sc.Clock = n.log, cfg.Clock
	if cfg.Cluster == "" {
		cfg.Cluster = sc.Label
	}
	sc.Label = cfg.Cluster
	if n.sec, err = security.Load(sc); err != nil {
		return nil, fmt.Errorf("neptune: NodeConfig.Security: %w", err)
	}
	if n.cfg.Cluster, err = clusterName(cfg.Cluster, n.sec); err != nil {
		return nil, err
	}
	if n.metrics, err = newServerMetrics(n.reg.Registerer); err != nil {
		return nil, err
	}
	return n, nil
}

// Register hosts svc's partitions on this node. Call it before Start.
func (n *Node) Register(svc service.Service, partitions ...int) error {
	if err := svc.Validate(); err != nil {
		return err
	}
	if len(partitions) == 0 {
		return fmt.Errorf("neptune: register %q: no partitions given", svc.Name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started {
		return fmt.Errorf("neptune: register %q: node already started", svc.Name)
	}
	if _, dup := n.services[svc.Name]; dup {
		return fmt.Errorf("neptune: register %q: service already registered", svc.Name)
	}
	h := &hosted{svc: svc, methods: map[string]*service.Method{}, clock: n.clock, tracer: n.tracer}
	for _, p := range partitions {
		if p < 0 || p > 1<<30 {
			return fmt.Errorf("neptune: register %q: partition %d out of range", svc.Name, p)
		}
		h.partitions = append(h.partitions, int32(p))
	}
	slices.Sort(h.partitions)
	h.partitions = slices.Compact(h.partitions)
	for i := range h.svc.Methods {
		h.methods[h.svc.Methods[i].Name] = &h.svc.Methods[i]
	}
	name := svc.Name
	sch, err := svc.NewScheduler()
	if err != nil {
		return fmt.Errorf("neptune: register %q: %w", svc.Name, err)
	}
	pool, err := dispatch.New(dispatch.Config{Workers: svc.Workers, QueueLimit: svc.QueueLimit, OnChange: n.loadChanged}, aggregation.WithReduceFirst(&h.svc, sch), n.clock,
		func(class string, queued, _ time.Duration, _ error) {
			n.metrics.wait.WithLabelValues(name, class).Observe(queued.Seconds())
		})
	if err != nil {
		return fmt.Errorf("neptune: register %q: %w", svc.Name, err)
	}
	h.pool = pool
	if svc.Aggregate != nil {
		h.ledger = &dac.Ledger{}
	}
	if svc.Replication != nil {
		if err := n.registerReplicated(h); err != nil {
			pool.Close()
			return err
		}
	}
	n.services[svc.Name] = h
	return nil
}

// registerReplicated hands h's partitions to the replication runtime.
func (n *Node) registerReplicated(h *hosted) error {
	if n.cfg.DataDir == "" {
		return fmt.Errorf("neptune: register %q: NodeConfig.DataDir is required to host a replicated service", h.svc.Name)
	}
	if n.repl == nil {
		n.repl = replication.New(replication.Config{Self: n.cfg.ID, DataDir: n.cfg.DataDir, Directory: (*peers)(n), Sender: (*peers)(n),
			Logger: n.log, Tracer: n.tracer, Clock: n.clock, OnRoleChange: n.announceNow, DiskReserve: n.cfg.Storage.Reserve, RebuildCorrupt: n.cfg.Storage.RebuildCorrupt})
	}
	ps := make([]replication.Partition, len(h.partitions))
	for i, p := range h.partitions {
		ps[i] = replication.Partition{Service: h.svc.Name, Partition: p, Replication: h.svc.Replication,
			Check: h.svc.Check, Executor: writes{h}, Snapshots: h.svc.Snapshots}
	}
	return n.repl.Register(ps...)
}

// Start opens the node's listeners and joins the cluster.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	if n.started {
		n.mu.Unlock()
		return errors.New("neptune: node already started")
	}
	n.started = true
	n.mu.Unlock()
	if err := n.registerStartMetrics(); err != nil {
		return err
	}
	if n.cfg.DataDir != "" {
		id, err := claimIdentity(n.cfg.DataDir, n.cfg.Cluster, n.cfg.ID)
		if err != nil {
			if errors.Is(err, ErrCorruptIdentity) {
				n.log.Error("data directory's identity file corrupt: the node refuses to start", "path", n.cfg.DataDir, "kind", "identity", "err", err)
			}
			n.Close()
			return err
		}
		n.log.Info("data directory claimed", "cluster", id.Cluster, "incarnation", id.Incarnation)
	}
	bind, err := hostaddr.BindIP(n.cfg.Host)
	if err != nil {
		n.Close()
		return fmt.Errorf("neptune: host %q (NodeConfig.Host, --host): %w", n.cfg.Host, err)
	}
	if n.adv, err = hostaddr.Advertise(n.cfg.Host, n.cfg.Advertise, n.cfg.Join); err != nil {
		n.Close()
		return fmt.Errorf("neptune: advertise address (NodeConfig.Advertise, --advertise): %w", err)
	}
	n.rpcLn, err = net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(n.cfg.RPCPort)))
	if err != nil {
		n.Close()
		return fmt.Errorf("neptune: listen for calls (RPCPort): %w", err)
	}
	if n.sec.Insecure() {
		n.log.Warn("running INSECURE: plaintext gRPC anyone may call, gossip anyone may join, unauthenticated polls; give the node a certificate directory instead")
	}
	grpcOpts, err := n.sec.Transport().ServerOptions()
	if err != nil {
		n.Close()
		return fmt.Errorf("neptune: NodeConfig.Security: %w", err)
	}
	if n.repl != nil {
		n.inflight.Count(n.repl.HeldBytes)
	}
	grpcOpts = append(append(grpcOpts, transport.SizeOptions(n.cfg.MaxMessageBytes)...), n.inflight.ServerOptions()...)
	if tp := n.cfg.TracerProvider; tp != nil {
		// A server span per RPC, child of the caller's by the trace
		// context in its metadata; only when traced.
		grpcOpts = append(grpcOpts, grpc.StatsHandler(obs.ServerHandler(tp)))
	}
	n.grpc = grpc.NewServer(grpcOpts...)
	pb.RegisterNodeServer(n.grpc, &nodeServer{n: n})
	n.health = health.NewServer()
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(n.grpc, n.health)
	go func() { _ = n.grpc.Serve(n.rpcLn) }()

	n.polls, err = transport.ListenPoll(net.JoinHostPort(bind, strconv.Itoa(n.cfg.PollPort)), n.load, n.log,
		append([]transport.PollOption{transport.WithVersions(n.pollVersion), transport.WithWork(n.aggWork)}, n.sec.PollServerOptions()...)...)
	if err != nil {
		n.Close()
		return fmt.Errorf("neptune: listen for polls (PollPort): %w", err)
	}
	n.pushes.Store(n.polls)
	if n.cfg.MetricsAddr != "" {
		if err := n.serveMetrics(); err != nil {
			n.Close()
			return err
		}
	}
	n.client, err = client.New(ctx, client.Config{
		Client: config.Client{
			Host:            n.cfg.Host,
			Advertise:       n.adv,
			Join:            n.cfg.Join,
			AnnounceTTL:     n.cfg.AnnounceTTL,
			Balance:         n.cfg.Balance,
			ServiceBalance:  n.cfg.ServiceBalance,
			Registerer:      n.reg.Registerer,
			Logger:          n.log,
			TracerProvider:  n.cfg.TracerProvider,
			MaxMessageBytes: n.cfg.MaxMessageBytes,
		},
		ID:               n.cfg.ID,
		JoinTimeout:      n.cfg.JoinTimeout,
		Port:             n.cfg.GossipPort,
		AnnounceInterval: n.cfg.AnnounceInterval,
		Announce:         n.announcement,
		Clock:            n.clock,
		Material:         n.sec,
		Identity:         n.identity(),
	})
	if err != nil {
		n.Close()
		return err
	}
	n.dash.client.Store(n.client)
	n.agg = aggregation.NewServer(aggregation.ServerConfig{Self: n.cfg.ID, Services: n, Caller: n.client.Aggregation(), Clock: n.clock,
		MaxDeadline: n.cfg.MaxAggregateDeadline, MaxParticipants: n.cfg.MaxAggregateParticipants, Tracer: n.tracer})
	if n.repl != nil {
		if err := n.repl.Start(); err != nil {
			n.Close()
			return err
		}
		// The first announcement went out before the replicas were open.
		n.client.Gossip().Announce()
		n.startPlacement()
	}
	go n.acct.run(n.acctStop)
	hctx, stopHealth := context.WithCancel(context.Background())
	n.stopHealth = stopHealth
	go n.serveHealth(hctx, n.health)
	n.log.Info("node started", "rpc", n.rpcLn.Addr().String(), "poll", n.polls.Addr(), "gossip", n.GossipAddr(), "services", len(n.services))
	return nil
}

// announceNow announces the node at once (a replica's role changed). The
// partition loops that call it start after the client exists.
func (n *Node) announceNow() {
	if n.client != nil {
		n.client.Gossip().AnnounceNow()
	}
}

// Client returns the node's own client, which shares its yellow pages
// (nil before Start).
func (n *Node) Client() *client.Client { return n.client }

// GossipAddr is the address other nodes and clients join.
func (n *Node) GossipAddr() string { return n.client.Gossip().Addr() }

// RPCAddr is the gRPC address calls arrive on.
func (n *Node) RPCAddr() string { return hostaddr.Join(n.adv, n.rpcLn.Addr().String()) }

// ReloadSecurity re-reads the node's certificate and keyring files now.
func (n *Node) ReloadSecurity() error { return n.sec.Reload() }

// MetricsAddr is where /metrics is served, or "".
func (n *Node) MetricsAddr() string {
	if n.httpLn == nil {
		return ""
	}
	return n.httpLn.Addr().String()
}

// DefaultDrainTimeout bounds a drain: the hand-over of the primary roles
// (at most half of it) and then the calls in flight.
const DefaultDrainTimeout = 10 * time.Second

// drainGrace is how long a draining node, gone from the yellow pages,
// still takes calls that clients had already routed to it.
const drainGrace = 300 * time.Millisecond

// Drain stops the node without failing a call, within DrainTimeout (or
// ctx): it reports itself not ready, hands every primary role it holds to
// an in-sync replica (replication.Runtime.Drain), leaves the gossip so
// clients stop choosing it, finishes the calls in flight (a call that
// arrives after is refused with the retryable ErrClosed, or never reaches
// the node: the client goes to another replica), then closes. It returns
// the partitions it still led when it stopped (none had an in-sync
// replica to take over).
func (n *Node) Drain(ctx context.Context) []string {
	timeout := n.cfg.DrainTimeout
	ctx, cancel := clock.WithTimeout(ctx, n.clock, timeout)
	defer cancel()
	start := n.clock.Now()
	kept := n.handOff(ctx, timeout)
	n.finishDrain(ctx, start, timeout)
	return kept
}

// handOff is Drain's first half: not ready, and the primary roles handed
// over, for at most half the bound.
func (n *Node) handOff(ctx context.Context, timeout time.Duration) []string {
	n.draining.Store(true)
	select {
	case n.healthNow <- struct{}{}:
	default:
	}
	n.log.Info("draining: handing primaries over, then finishing the calls in flight", "bound", timeout)
	if n.repl == nil {
		return nil
	}
	hctx, cancel := clock.WithTimeout(ctx, n.clock, timeout/2)
	defer cancel()
	kept := n.repl.Drain(hctx)
	if len(kept) > 0 {
		n.log.Warn("draining: no in-sync replica took over these partitions; they elect a primary once this node is gone", "partitions", kept)
	}
	return kept
}

// finishDrain is Drain's second half: leave the gossip, take the calls
// already routed here, finish those in flight, close.
func (n *Node) finishDrain(ctx context.Context, start time.Time, timeout time.Duration) {
	if n.client != nil {
		_ = n.client.Leave()
	}
	select {
	case <-n.clock.After(drainGrace):
	case <-ctx.Done():
	}
	if n.grpc != nil {
		stopped := make(chan struct{})
		go func() { n.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			n.log.Warn("draining: calls still in flight at the bound are cut off", "bound", timeout)
			n.grpc.Stop()
		}
	}
	n.Close()
	n.log.Info("drained", "took", n.clock.Since(start).Round(time.Millisecond))
}

// drainRemote is the Drain RPC: it answers once the primaries are handed
// over, and finishes the drain after answering.
func (n *Node) drainRemote() []string {
	timeout := n.cfg.DrainTimeout
	ctx, cancel := clock.WithTimeout(context.Background(), n.clock, timeout)
	start := n.clock.Now()
	kept := n.handOff(ctx, timeout)
	go func() {
		defer cancel()
		n.finishDrain(ctx, start, timeout)
	}()
	return kept
}

// Done is closed once the node has stopped (Close, or a drain).
func (n *Node) Done() <-chan struct{} { return n.done }

// Close leaves the cluster, stops serving, fails queued requests and
// takes the node's metrics out of its registry. It is safe to call more
// than once.
func (n *Node) Close() error {
	n.closeOnce.Do(n.close)
	return nil
}

func (n *Node) close() {
	defer close(n.done)
	close(n.acctStop)
	if n.stopHealth != nil {
		n.stopHealth()
	}
	n.placeMu.Lock()
	placer := n.placer
	n.placeMu.Unlock()
	if placer != nil {
		placer.Stop()
	}
	if n.repl != nil {
		n.repl.Stop()
	}
	if n.client != nil {
		_ = n.client.Close()
	}
	if n.httpSrv != nil {
		_ = n.httpSrv.Close()
	}
	if n.polls != nil {
		_ = n.polls.Close()
	}
	if n.grpc != nil {
		stopped := make(chan struct{})
		go func() { n.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-n.clock.After(2 * time.Second):
			n.grpc.Stop()
		}
	}
	for _, h := range n.services {
		h.pool.Close()
	}
	n.unregisterMetrics()
	n.log.Info("node stopped")
}
