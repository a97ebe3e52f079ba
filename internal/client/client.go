// Package client is the call path: a Client looks a call up in its yellow
// pages once, consults the partition's replica view (kept up to date from
// membership's changes, not rebuilt per call), lets the service's
// balancing policy pick a replica (polling a few for their load) and sends
// the call, retrying on another replica when a node is unreachable and
// waiting briefly when a partition is between primaries. It also runs
// aggregations (internal/aggregation) and reports the yellow pages
// (Members, Partitions). The root package's Client wraps it; a node embeds
// one.
package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/aggregation"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/hostaddr"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/metrics"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/obs"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Config configures a client. Zero fields take the documented defaults.
type Config struct {
	// Client is what a program sets (neptune.ClientConfig); its Security
	// is loaded by the caller into Material.
	config.Client
	// ID is the client's gossip member name, unique in the cluster;
	// default "client-<random>-<n>".
	ID string
	// Port is where the gossip listener and the poll socket bind
	// (default: a free one).
	Port int
	// JoinTimeout bounds how long New tries Join (0: membership's
	// default; negative: until ctx ends).
	JoinTimeout time.Duration
	// AnnounceInterval is the yellow pages' refresh (membership's
	// default: 1 s).
	AnnounceInterval time.Duration
	// Announce describes what the member hosts (a node's client); nil for
	// a client that only listens.
	Announce func() *pb.Announcement
	// Clock times retries, polls and hedges (default real).
	Clock clock.Clock
	// Material is the member's loaded security (security.Load of
	// Client.Security), or an insecure one; required. Its connections use
	// mutual TLS and dial each node by the id its certificate must name,
	// its gossip is keyed, labelled and verifies signed announcements, its
	// polls carry an HMAC, and the client applies changes of the keyring
	// file while it runs.
	Material *security.Material
	// Identity is what the member tells and checks at join (a node's).
	Identity membership.Identity
}

// maxAttempts is how many replicas a call tries when connections fail
// (the paper retries three times before excluding a node).
const maxAttempts = 3

// A replica that leaves 3 polls in a row unanswered is not polled for a
// second (see membership.PollHealth).
const (
	maxPollMisses = 3
	suspectFor    = time.Second
)

var seq atomic.Int64

// Client calls services anywhere in the cluster. It is safe for concurrent
// use.
type Client struct {
	maxBody int
	tracer  trace.Tracer // nil: tracing off
	log     *slog.Logger
	clock   clock.Clock
	gossip  *membership.Gossip
	poller  *transport.Poller
	conns   *transport.Conns
	metrics *clientMetrics
	// balance configures the policy of every service that services
	// (Config.ServiceBalance) does not name; defaults filled in both.
	balance  balance.Config
	services map[string]balance.Config
	retry    config.RetryPolicy
	agg      *aggregation.Caller
	aggM     *aggregation.Metrics
	// reg and members are for Close, which unregisters the metrics.
	reg      prometheus.Registerer
	members  prometheus.Collector
	refusals *security.Refusals // its counter, registered by the client
	// stopWatch ends the keyring file watcher.
	stopWatch context.CancelFunc

	// mu guards views, balancers and rng; a call takes it once per pick.
	mu        sync.Mutex
	views     views
	balancers map[string]*balancer
	rng       *rand.Rand

	// clientID and writeSeq make the WriteIDs of this client's writes:
	// its id (random per Client) and their sequence numbers; anonymous
	// turns them off (lab only).
	clientID string
	writeSeq atomic.Uint64
	// streamSeq numbers this client's write streams, whose identities
	// are clientID~s<n> (the messages: with their seq).
	streamSeq atomic.Uint64
	anonymous atomic.Bool
}

// identify gives a write without an identity the client's id and the next
// sequence number, once per call (every retry carries the same).
func (c *Client) identify(r *request) {
	if r.mode() != service.Write || r.identified() || c.anonymous.Load() {
		return
	}
	transport.SetWriteID(r.in, nerr.WriteID{ClientID: c.clientID, Seq: c.writeSeq.Add(1)})
}

// SetWriteIdentities turns the identities of this client's writes on (the
// default) or off. Only the lab turns them off, to measure what
// exactly-once costs; without them a write of unknown outcome is never
// retried.
func (c *Client) SetWriteIdentities(on bool) { c.anonymous.Store(!on) }

// New joins the cluster (as a listener, or announcing cfg.Announce).
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := config.ValidateBalance("ClientConfig", cfg.Balance, cfg.ServiceBalance); err != nil {
		return nil, err
	}
	cfg.Balance = cfg.Balance.WithDefaults()
	services := make(map[string]balance.Config, len(cfg.ServiceBalance))
	for name, b := range cfg.ServiceBalance {
		services[name] = b.WithDefaults()
	}
	if err := cfg.Retry.Validate("Retry"); err != nil {
		return nil, fmt.Errorf("neptune: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = obs.Logger(cfg.Logger)
	if cfg.Host == "" {
		cfg.Host = defaultHost(cfg.Join)
	}
	bind, err := hostaddr.BindIP(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("neptune: host %q (ClientConfig.Host, --host): %w", cfg.Host, err)
	}
	adv, err := hostaddr.Advertise(cfg.Host, cfg.Advertise, cfg.Join)
	if err != nil {
		return nil, fmt.Errorf("neptune: advertise address (ClientConfig.Advertise, --advertise): %w", err)
	}
	advIP, err := hostaddr.IP(adv)
	if err != nil {
		return nil, fmt.Errorf("neptune: advertise address %q (ClientConfig.Advertise, --advertise): %w", adv, err)
	}
	warnUnreachable(cfg.Logger, adv, cfg.Join)
	if cfg.ID == "" {
		cfg.ID = fmt.Sprintf("client-%d-%d", rand.Uint32(), seq.Add(1))
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Material == nil {
		return nil, errors.New("neptune: client: no security material (security.Load, or an explicitly insecure one)")
	}
	dial := []grpc.DialOption{transport.CallSizeOptions(cmp.Or(cfg.MaxMessageBytes, nerr.DefaultMaxMessageBytes))}
	if cfg.TracerProvider != nil {
		// A span per RPC, its trace context sent in the metadata: only
		// when traced, so a client without tracing pays nothing.
		dial = append(dial, grpc.WithStatsHandler(obs.ClientHandler(cfg.TracerProvider)))
	}
	conns, err := cfg.Material.Transport().NewConns(dial...)
	if err != nil {
		return nil, fmt.Errorf("neptune: %w", err)
	}
	c := &Client{
		tracer:    obs.Tracer(cfg.TracerProvider),
		log:       cfg.Logger,
		clock:     clock.OrReal(cfg.Clock),
		conns:     conns,
		maxBody:   cmp.Or(cfg.MaxMessageBytes, nerr.DefaultMaxMessageBytes),
		balance:   cfg.Balance,
		services:  services,
		retry:     cfg.Retry.WithDefaults(),
		reg:       cfg.Registerer,
		balancers: map[string]*balancer{},
		rng:       rand.New(rand.NewPCG(rand.Uint64(), uint64(seq.Add(1)))),
		clientID:  fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64()),
	}
	c.views.init()
	if c.metrics, err = newClientMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	if c.poller, err = transport.NewPoller(cfg.Logger, append([]transport.PollerOption{transport.WithClock(c.clock), transport.WithPollerBind(net.ParseIP(bind))}, cfg.Material.PollerOptions()...)...); err != nil {
		c.metrics.unregister(cfg.Registerer)
		return nil, fmt.Errorf("neptune: %w", err)
	}
	c.poller.OnLate(c.reportLate)
	mcfg := membership.Config{
		NodeID:           cfg.ID,
		BindAddr:         bind,
		BindPort:         cfg.Port,
		AdvertiseAddr:    advIP.String(),
		Join:             cfg.Join,
		JoinTimeout:      cfg.JoinTimeout,
		AnnounceInterval: cfg.AnnounceInterval,
		TTL:              cfg.AnnounceTTL,
		Announce:         cfg.Announce,
		Watch:            (*viewWatcher)(c),
		Identity:         cfg.Identity,
		Logger:           cfg.Logger,
		Clock:            c.clock,
	}
	cfg.Material.Gossip(&mcfg)
	c.gossip, err = membership.Start(ctx, mcfg)
	if err != nil {
		_ = c.poller.Close()
		c.metrics.unregister(cfg.Registerer)
		return nil, fmt.Errorf("neptune: %w", err)
	}
	members := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "neptune_members",
		Help: "Live gossip members this node sees, itself included.",
	}, func() float64 { return float64(c.gossip.Members()) })
	if err := metrics.Register(cfg.Registerer, metrics.Metric{Name: "neptune_members", Collector: members}); err != nil {
		_ = c.Close()
		return nil, err
	}
	c.members = members
	if err := cfg.Material.Refusals.Register(cfg.Registerer); err != nil {
		_ = c.Close()
		return nil, err
	}
	c.refusals = cfg.Material.Refusals
	var wctx context.Context
	wctx, c.stopWatch = context.WithCancel(context.Background())
	go cfg.Material.WatchKeyring(wctx)
	if c.aggM, err = aggregation.NewMetrics(cfg.Registerer); err != nil {
		_ = c.Close()
		return nil, err
	}
	c.agg = aggregation.NewCaller(aggregation.Config{
		Directory: c.gossip, Poller: c.poller, Dialer: c.conns, PollWait: max(cfg.Balance.Discard, 0), // negative (wait for all): aggregation's default
		Rand: rand.New(rand.NewPCG(c.rng.Uint64(), c.rng.Uint64())), Clock: c.clock, Metrics: c.aggM, Tracer: c.tracer,
	})
	return c, nil
}

// Leave leaves the cluster's gossip and stops announcing, keeping the
// connections, so a draining node goes on forwarding and finishing the
// calls in flight; Close still follows.
func (c *Client) Leave() error { return c.gossip.Close() }

// Close leaves the cluster, closes connections and takes the client's
// metrics out of its registry.
func (c *Client) Close() error {
	if c.stopWatch != nil {
		c.stopWatch()
	}
	err := c.gossip.Close()
	_ = c.poller.Close()
	_ = c.conns.Close()
	c.metrics.unregister(c.reg)
	c.aggM.Unregister(c.reg)
	if c.members != nil {
		c.reg.Unregister(c.members)
	}
	if c.refusals != nil {
		c.refusals.Unregister(c.reg)
	}
	return err
}

// Gossip is the client's membership: its yellow pages, and for a node the
// announcing member.
func (c *Client) Gossip() *membership.Gossip { return c.gossip }

// Conns is the client's connection cache, which its node shares.
func (c *Client) Conns() *transport.Conns { return c.conns }

// Aggregation is the client's aggregation caller, which its node uses to
// forward subtrees (so both learn from the same leaf latencies).
func (c *Client) Aggregation() *aggregation.Caller { return c.agg }

// AggregateStream starts a streaming aggregation
// (aggregation.Caller.Stream); x as for Aggregate.
func (c *Client) AggregateStream(ctx context.Context, a aggregation.Aggregation, x aggregation.Experiment) (*aggregation.Stream, error) {
	return c.agg.Stream(ctx, a, x)
}

// Aggregate runs a Data Aggregation Call (aggregation.Caller.Aggregate); x
// selects an experiment's baseline, zero for the product's behaviour.
func (c *Client) Aggregate(ctx context.Context, a aggregation.Aggregation, x aggregation.Experiment) (*aggregation.Result, error) {
	return c.agg.Aggregate(ctx, a, x)
}

// defaultHost is where a client's gossip binds by default: loopback when
// every seed is on loopback (a local cluster), else every interface, so
// the cluster can reach it and tell it of changes at once.
func defaultHost(seeds []string) string {
	for _, s := range seeds {
		if h, _, err := net.SplitHostPort(s); err != nil || !hostaddr.Loopback(h) {
			return "0.0.0.0"
		}
	}
	return "127.0.0.1"
}

// warnUnreachable warns when a member advertises a loopback address to a
// cluster that is not on loopback: the nodes cannot reach its gossip, so
// it learns of a failover only at its own next anti-entropy exchange (30 s
// or more), and calls fail meanwhile.
func warnUnreachable(log *slog.Logger, adv string, seeds []string) {
	if !hostaddr.Loopback(adv) {
		return
	}
	for _, s := range seeds {
		if h, _, err := net.SplitHostPort(s); err == nil && !hostaddr.Loopback(h) {
			log.Warn("this member's gossip is advertised on loopback, which the cluster cannot reach: it will learn of changes late; set the host (--host) or the advertised address (--advertise) to one the nodes can reach",
				"advertised", adv, "seed", s)
			return
		}
	}
}
