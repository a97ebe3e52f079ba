package neptune

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// maxAttempts is how many replicas a call tries when connections fail
// (the paper retries three times before excluding a node).
const maxAttempts = 3

// ClientConfig configures Dial.
type ClientConfig struct {
	// Join lists gossip addresses ("host:port") of cluster nodes. Required.
	Join []string
	// Host is the local address the client's gossip listener binds to.
	// Default 127.0.0.1.
	Host string
	// Balance selects the load-balancing policy; the default polls 3
	// replicas and discards answers slower than 10 ms.
	Balance balance.Config
	// AnnounceTTL is how long yellow-page entries live without refresh.
	AnnounceTTL time.Duration
	// Registry receives client metrics; nil creates a private one.
	Registry *prometheus.Registry
	Logger   *slog.Logger
}

var clientSeq atomic.Int64

// Dial joins a cluster as a client: it learns the yellow pages by gossip but
// hosts nothing.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if len(cfg.Join) == 0 {
		return nil, errors.New("neptune: ClientConfig.Join is empty: name at least one node's gossip address")
	}
	if cfg.Balance == (balance.Config{}) {
		cfg.Balance = balance.DefaultConfig()
	} else if err := cfg.Balance.Validate(); err != nil {
		return nil, fmt.Errorf("neptune: ClientConfig.Balance: %w", err)
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	id := fmt.Sprintf("client-%d-%d", time.Now().UnixNano()%1e9, clientSeq.Add(1))
	return newClient(ctx, clientParts{
		id:       id,
		host:     cfg.Host,
		join:     cfg.Join,
		ttl:      cfg.AnnounceTTL,
		balance:  cfg.Balance,
		registry: cfg.Registry,
		log:      cfg.Logger.With("client", id),
	})
}

// clientParts is what a client needs, whether standalone or inside a node.
type clientParts struct {
	id            string
	host          string
	port          int
	join          []string
	interval, ttl time.Duration
	balance       balance.Config
	announce      func() *pb.Announcement
	registry      *prometheus.Registry
	log           *slog.Logger
}

// Client calls services anywhere in the cluster. It is safe for concurrent
// use.
type Client struct {
	log     *slog.Logger
	gossip  *membership.Gossip
	poller  *transport.Poller
	conns   *transport.Conns
	metrics *clientMetrics
	balance balance.Config
	agg     aggState

	mu       sync.Mutex
	rng      *rand.Rand
	policies map[string]balance.Policy // per service
	health   *membership.PollHealth
}

func newClient(ctx context.Context, p clientParts) (*Client, error) {
	c := &Client{
		log:      p.log,
		conns:    transport.NewConns(),
		metrics:  newClientMetrics(p.registry),
		balance:  p.balance,
		rng:      rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(clientSeq.Add(1)))),
		policies: map[string]balance.Policy{},
		health:   membership.NewPollHealth(maxPollMisses, suspectFor),
	}
	var err error
	if c.poller, err = transport.NewPoller(p.log); err != nil {
		return nil, fmt.Errorf("neptune: %w", err)
	}
	c.poller.OnLate(c.reportLate)
	c.gossip, err = membership.Start(ctx, membership.Config{
		NodeID:           p.id,
		BindAddr:         p.host,
		BindPort:         p.port,
		Join:             p.join,
		AnnounceInterval: p.interval,
		TTL:              p.ttl,
		Announce:         p.announce,
		Logger:           p.log,
	})
	if err != nil {
		_ = c.poller.Close()
		return nil, fmt.Errorf("neptune: %w", err)
	}
	members := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "neptune_members",
		Help: "Live gossip members this node sees, itself included.",
	}, func() float64 { return float64(c.gossip.Members()) })
	if err := p.registry.Register(members); err != nil {
		c.log.Debug("members gauge not registered", "err", err)
	}
	return c, nil
}

// Close leaves the cluster and closes connections.
func (c *Client) Close() error {
	err := c.gossip.Close()
	_ = c.poller.Close()
	_ = c.conns.Close()
	return err
}

// Session is the paper's NeptuneHandle: a caller's identity across calls.
// It records the newest partition version each call returned, which
// consistency level 3 uses for read-your-writes and monotonic reads.
// A Session is safe for concurrent use.
type Session struct {
	mu       sync.Mutex
	versions map[string]uint64
}

// NewSession returns an empty session.
func NewSession() *Session { return &Session{versions: map[string]uint64{}} }

// Version is the newest version of service's partition this session saw.
func (s *Session) Version(service string, partition int) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[sessionKey(service, partition)]
}

func (s *Session) observe(service string, partition int, v uint64) {
	if s == nil || v == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sessionKey(service, partition)
	s.versions[k] = max(s.versions[k], v)
}

// floor is the version a read must be served at: the session's newest seen
// version (consistency level 3 enforces it; other levels ignore it).
func (s *Session) floor(service string, partition int, mode Mode) uint64 {
	if s == nil || mode != Read {
		return 0
	}
	return s.Version(service, partition)
}

func sessionKey(service string, partition int) string {
	return service + "/" + strconv.Itoa(partition)
}

// CallOption adjusts one call.
type CallOption func(*callOptions)

type callOptions struct{ class string }

// WithClass sets the service class of the call.
func WithClass(class string) CallOption { return func(o *callOptions) { o.class = class } }

// Call runs method on partition of service somewhere in the cluster and
// returns its response. sess may be nil. The call goes to the replica the
// balancing policy picks; if the connection fails, up to three replicas are
// tried and a failed node is excluded until it announces itself again.
func (c *Client) Call(ctx context.Context, sess *Session, service string, partition int, method string, mode Mode, body []byte, opts ...CallOption) (*Response, error) {
	start := time.Now()
	resp, err := c.call(ctx, service, partition, method, mode, body, sess.floor(service, partition, mode), opts)
	c.metrics.calls.WithLabelValues(service, method, errorCode(err)).Inc()
	c.metrics.latency.WithLabelValues(service, method).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	sess.observe(service, partition, resp.Version)
	return resp, nil
}

func (c *Client) call(ctx context.Context, service string, partition int, method string, mode Mode, body []byte, minVersion uint64, opts []CallOption) (*Response, error) {
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	req := &pb.CallRequest{Service: service, Partition: int32(partition), Method: method, Mode: pb.Mode(mode), Body: body, Class: o.class, MinVersion: minVersion}
	var last error
	failed, waited := 0, time.Duration(0)
	for {
		r, err := c.pick(ctx, req)
		if err != nil {
			if last != nil && errors.Is(err, nerr.ErrNoReplica) {
				return nil, fmt.Errorf("%w (after: %w)", err, last)
			}
			return nil, err
		}
		cl, err := c.conns.Client(r.RPCAddr)
		if err != nil {
			return nil, err
		}
		sent := time.Now()
		out, err := cl.Call(ctx, req)
		c.done(service, r.Node, time.Since(sent))
		if err == nil {
			return &Response{Body: out.Body, Version: out.Version}, nil
		}
		err = transport.FromStatus(r.Node, err)
		if ctx.Err() != nil {
			return nil, err
		}
		last = err
		switch {
		case transport.IsTransport(err):
			// The node is unreachable: exclude it and try another replica.
			c.gossip.Exclude(r.Node)
			if failed++; failed >= maxAttempts {
				return nil, err
			}
		case betweenPrimaries(err, mode) && waited < maxPrimaryWait:
			// The partition is electing a primary (a write that gets this
			// answer never ran): wait a little, then ask again.
			pause := min(primaryRetryPause<<min(failed+int(waited/primaryRetryPause), 3), maxPrimaryWait-waited)
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(pause):
			}
			waited += pause
		default:
			return nil, err
		}
		c.metrics.retries.Inc()
	}
}

// A call that meets a partition between primaries retries for at most
// maxPrimaryWait (failover takes well under a second), pausing
// primaryRetryPause, doubling, between tries.
const (
	maxPrimaryWait    = 2 * time.Second
	primaryRetryPause = 25 * time.Millisecond
)

// betweenPrimaries reports whether err says the partition has no primary
// right now, in a way that makes retrying safe: any read, and a write only
// when the replica answered so itself (not when forwarding it failed, in
// which case the old primary may have logged it).
func betweenPrimaries(err error, mode Mode) bool {
	noPrimary, noReplica := errors.Is(err, nerr.ErrNoPrimary), errors.Is(err, nerr.ErrNoReplica)
	if mode == Read {
		return noPrimary || noReplica // a replica forwarding to a dead primary says the latter
	}
	return noPrimary && !noReplica
}

// Stream calls a read-only stream method; read the chunks with Recv.
func (c *Client) Stream(ctx context.Context, sess *Session, service string, partition int, method string, body []byte, opts ...CallOption) (*Stream, error) {
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	req := &pb.CallRequest{Service: service, Partition: int32(partition), Method: method, Mode: pb.Mode(Read), Body: body, Class: o.class}
	r, err := c.pick(ctx, req)
	if err != nil {
		return nil, err
	}
	cl, err := c.conns.Client(r.RPCAddr)
	if err != nil {
		return nil, err
	}
	s, err := cl.Stream(ctx, req)
	if err != nil {
		return nil, transport.FromStatus(r.Node, err)
	}
	return &Stream{recv: s.Recv, node: r.Node}, nil
}

// Stream is the answer of a stream method.
type Stream struct {
	recv func() (*pb.Chunk, error)
	node string
}

// Recv returns the next chunk, or io.EOF after the last one.
func (s *Stream) Recv() ([]byte, error) {
	ch, err := s.recv()
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		return nil, transport.FromStatus(s.node, err)
	}
	return ch.Body, nil
}

// pick chooses the replica for req: yellow pages lookup, then the policy's
// polls, then its choice.
func (c *Client) pick(ctx context.Context, req *pb.CallRequest) (membership.Replica, error) {
	look := c.gossip.Replicas(req.Service, req.Partition)
	if err := c.checkLookup(req, look); err != nil {
		return membership.Replica{}, err
	}
	replicas := look.Replicas
	ids := make([]string, len(replicas))
	byID := make(map[string]membership.Replica, len(replicas))
	for i, r := range replicas {
		ids[i] = r.Node
		byID[r.Node] = r
	}
	rv, replicated := c.replView(req.Service, req.Partition)
	if replicated {
		if id, ok := rv.direct(req, ids); ok {
			return byID[id], nil
		}
		ids = rv.candidates(ids)
	}

	c.mu.Lock()
	pol, err := c.policy(req.Service)
	if err != nil {
		c.mu.Unlock()
		return membership.Replica{}, err
	}
	now := time.Now()
	ids = c.health.Filter(now, ids)
	if len(ids) == 1 { // no choice to make: a poll would only add a round trip
		pol.Sent(now, ids[0])
		c.mu.Unlock()
		return byID[ids[0]], nil
	}
	plan := pol.Plan(now, ids)
	c.mu.Unlock()

	if p := rv.mustPoll(req, ids); p != "" && !slices.Contains(plan.Poll, p) {
		plan.Poll = append(plan.Poll, p)
	}
	var loads []balance.Load
	var answers []transport.PollAnswer
	if len(plan.Poll) > 0 {
		targets := make([]transport.PollTarget, len(plan.Poll))
		for i, id := range plan.Poll {
			targets[i] = transport.PollTarget{Replica: id, Addr: byID[id].PollAddr}
		}
		start := time.Now()
		answers := c.poller.PollFirst(ctx, targets, req.Service, req.Partition, req.Class, plan.Wait, plan.Enough)
		c.metrics.pollTime.Observe(time.Since(start).Seconds())
		c.metrics.polls.WithLabelValues("answered").Add(float64(len(answers)))
		c.metrics.polls.WithLabelValues("late_or_unneeded").Add(float64(len(targets) - len(answers)))
		loads = make([]balance.Load, len(answers))
		for i, a := range answers {
			loads[i] = balance.Load{Replica: a.Replica, Queue: a.Queue, RTT: a.RTT}
		}
		c.notePollMisses(time.Now(), plan.Poll, answers)
	}

	if keep, ok := rv.fresh(req, ids, answers); replicated && ok {
		ids = keep
		loads = slices.DeleteFunc(loads, func(l balance.Load) bool { return !slices.Contains(keep, l.Replica) })
	}
	c.mu.Lock()
	now = time.Now()
	choice := pol.Choose(now, ids, loads)
	pol.Sent(now, choice)
	c.mu.Unlock()
	return byID[choice], nil
}

// reportLate gives a poll answer that missed its call to the service's
// policy, which may learn from it (the default poller pools it).
func (c *Client) reportLate(service string, a transport.PollAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.policies[service]; ok {
		p.Report(time.Now(), balance.Load{Replica: a.Replica, Queue: a.Queue, RTT: a.RTT})
	}
}

// A replica that leaves 3 polls in a row unanswered is not polled for a
// second (see membership.PollHealth).
const (
	maxPollMisses = 3
	suspectFor    = time.Second
)

func (c *Client) notePollMisses(now time.Time, polled []string, answers []transport.PollAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.health.Observe(now, polled, func(id string) bool {
		return slices.ContainsFunc(answers, func(a transport.PollAnswer) bool { return a.Replica == id })
	})
}

// checkLookup turns an empty lookup into the precise error.
func (c *Client) checkLookup(req *pb.CallRequest, look membership.Lookup) error {
	if m, ok := c.gossip.Method(req.Service, req.Method); ok {
		if Mode(m.Mode) != Mode(req.Mode) {
			return fmt.Errorf("%w: %s.%s is %s, called as %s", nerr.ErrWrongMode, req.Service, req.Method, Mode(m.Mode), Mode(req.Mode))
		}
	} else if look.ServiceKnown && len(look.Replicas) > 0 {
		return fmt.Errorf("%w %q in service %q", nerr.ErrUnknownMethod, req.Method, req.Service)
	}
	switch {
	case len(look.Replicas) > 0:
		return nil
	case look.PartitionKnown:
		return fmt.Errorf("%w for %s partition %d", nerr.ErrNoReplica, req.Service, req.Partition)
	case look.ServiceKnown:
		return fmt.Errorf("%w %d of service %q", nerr.ErrUnknownPartition, req.Partition, req.Service)
	}
	return fmt.Errorf("%w %q", nerr.ErrUnknownService, req.Service)
}

// policy returns service's balancing policy; callers hold c.mu.
func (c *Client) policy(service string) (balance.Policy, error) {
	if p, ok := c.policies[service]; ok {
		return p, nil
	}
	p, err := balance.New(c.balance, rand.New(rand.NewPCG(c.rng.Uint64(), c.rng.Uint64())))
	if err != nil {
		return nil, fmt.Errorf("neptune: balance policy for %q: %w", service, err)
	}
	c.policies[service] = p
	return p, nil
}

func (c *Client) done(service, node string, latency time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.policies[service]; ok {
		p.Done(time.Now(), node, latency)
	}
}

// Member is one node in the yellow pages, as Status reports it.
type Member struct {
	Node        string
	RPCAddr     string
	PollAddr    string
	MetricsAddr string
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
// partition it hosts (answers later than wait count as -1).
func (c *Client) Members(ctx context.Context, wait time.Duration) []Member {
	now := time.Now()
	var out []Member
	for _, e := range c.gossip.Snapshot() {
		a := e.Ann
		if len(a.Services) == 0 {
			continue
		}
		m := Member{Node: a.NodeId, RPCAddr: a.RpcAddr, PollAddr: a.PollAddr, MetricsAddr: a.MetricsAddr, Age: now.Sub(e.Seen)}
		for _, s := range a.Services {
			hs := HostedService{Name: s.Name, Load: map[int]int{}}
			for _, p := range s.Partitions {
				hs.Partitions = append(hs.Partitions, int(p))
				hs.Load[int(p)] = -1
				for _, ans := range c.poller.Poll(ctx, []transport.PollTarget{{Replica: a.NodeId, Addr: a.PollAddr}}, s.Name, p, "", wait) {
					hs.Load[int(p)] = ans.Queue
				}
			}
			m.Services = append(m.Services, hs)
		}
		out = append(out, m)
	}
	return out
}
