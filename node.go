package neptune

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/dispatch"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// NodeConfig configures a node. Zero fields take the documented defaults.
type NodeConfig struct {
	// ID names the node; unique in the cluster. Required.
	ID string
	// Host is the address every listener binds to. Default 127.0.0.1.
	Host string
	// GossipPort, RPCPort and PollPort are the memberlist, gRPC and UDP
	// load-poll ports; 0 picks a free port.
	GossipPort, RPCPort, PollPort int
	// MetricsAddr ("host:port") serves Prometheus /metrics; empty disables.
	MetricsAddr string
	// Pprof also serves net/http/pprof under /debug/pprof/ on MetricsAddr,
	// for profiling a live node; off by default since it exposes internals.
	Pprof bool
	// Join lists gossip addresses ("host:port") of existing nodes.
	Join []string
	// AnnounceInterval and AnnounceTTL control the yellow pages' soft
	// state: refresh every 1 s, expire after 5 s (the paper's values).
	AnnounceInterval time.Duration
	AnnounceTTL      time.Duration
	// Balance selects the load-balancing policy of the node's own client.
	Balance balance.Config
	// Registry receives the node's metrics; nil creates a private one.
	Registry *prometheus.Registry
	// Logger receives the node's logs; every line carries the node id.
	Logger *slog.Logger
	// DataDir holds the write logs of replicated partitions (one pebble
	// store per partition replica under DataDir/service/partition).
	DataDir string
}

func (c NodeConfig) withDefaults() NodeConfig {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.AnnounceInterval == 0 {
		c.AnnounceInterval = membership.DefaultAnnounceInterval
	}
	if c.AnnounceTTL == 0 {
		c.AnnounceTTL = membership.DefaultTTL
	}
	if c.Balance == (balance.Config{}) {
		c.Balance = balance.DefaultConfig()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first invalid field by name.
func (c NodeConfig) Validate() error {
	if c.ID == "" {
		return errors.New("neptune: NodeConfig.ID is required")
	}
	for name, p := range map[string]int{"GossipPort": c.GossipPort, "RPCPort": c.RPCPort, "PollPort": c.PollPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("neptune: NodeConfig.%s must be in 0..65535, got %d", name, p)
		}
	}
	if c.AnnounceInterval < 0 {
		return fmt.Errorf("neptune: NodeConfig.AnnounceInterval must be > 0, got %v", c.AnnounceInterval)
	}
	if c.AnnounceTTL != 0 && c.AnnounceTTL <= c.AnnounceInterval {
		return fmt.Errorf("neptune: NodeConfig.AnnounceTTL (%v) must exceed AnnounceInterval (%v)", c.AnnounceTTL, c.AnnounceInterval)
	}
	if c.Balance != (balance.Config{}) {
		if err := c.Balance.Validate(); err != nil {
			return fmt.Errorf("neptune: NodeConfig.Balance: %w", err)
		}
	}
	return nil
}

// hosted is one service on this node.
type hosted struct {
	svc        Service
	partitions []int32
	methods    map[string]*Method
	pool       *dispatch.Pool
	// ledger is the aggregation load index (nil without Aggregate).
	ledger *dac.Ledger
}

// Node hosts service partitions and serves calls to them. It is also a
// full client of the cluster (Client), as every node is functionally the same.
type Node struct {
	cfg     NodeConfig
	log     *slog.Logger
	metrics *serverMetrics

	mu        sync.Mutex
	services  map[string]*hosted
	started   bool
	closeOnce sync.Once

	grpc    *grpc.Server
	rpcLn   net.Listener
	polls   *transport.PollServer
	gossip  *membership.Gossip
	client  *Client
	repl    *replNode
	httpSrv *http.Server
	httpLn  net.Listener
}

// NewNode creates a node; Register services, then Start it.
func NewNode(cfg NodeConfig) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.ID),
		services: map[string]*hosted{},
	}
	n.metrics = newServerMetrics(cfg.Registry)
	return n, nil
}

// Register hosts svc's partitions on this node. Call it before Start.
func (n *Node) Register(svc Service, partitions ...int) error {
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
	h := &hosted{svc: svc, methods: map[string]*Method{}}
	for _, p := range partitions {
		if p < 0 || p > 1<<30 {
			return fmt.Errorf("neptune: register %q: partition %d out of range", svc.Name, p)
		}
		h.partitions = append(h.partitions, int32(p))
	}
	slices.Sort(h.partitions)
	h.partitions = slices.Compact(h.partitions)
	for i := range svc.Methods {
		h.methods[svc.Methods[i].Name] = &svc.Methods[i]
	}
	name := svc.Name
	sch, err := svc.newScheduler()
	if err != nil {
		return fmt.Errorf("neptune: register %q: %w", svc.Name, err)
	}
	pool, err := dispatch.New(dispatch.Config{Workers: svc.Workers, QueueLimit: svc.QueueLimit}, withReduceFirst(svc, sch), clock.Real(),
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

// Start opens the node's listeners and joins the cluster.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	if n.started {
		n.mu.Unlock()
		return errors.New("neptune: node already started")
	}
	n.started = true
	n.mu.Unlock()
	reg := n.cfg.Registry
	for name, h := range n.services {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "neptune_queue_length",
			Help:        "Load index of a hosted service: active plus queued requests.",
			ConstLabels: prometheus.Labels{"service": name},
		}, func() float64 { return float64(h.pool.Load()) }))
	}
	reg.MustRegister(&classCollector{n: n})

	var err error
	n.rpcLn, err = net.Listen("tcp", net.JoinHostPort(n.cfg.Host, strconv.Itoa(n.cfg.RPCPort)))
	if err != nil {
		return fmt.Errorf("neptune: listen for calls (RPCPort): %w", err)
	}
	n.grpc = grpc.NewServer(transport.ServerOptions()...)
	pb.RegisterNodeServer(n.grpc, &nodeServer{n: n})
	go func() { _ = n.grpc.Serve(n.rpcLn) }()

	n.polls, err = transport.ListenPoll(net.JoinHostPort(n.cfg.Host, strconv.Itoa(n.cfg.PollPort)), n.load, n.log, transport.WithVersions(n.pollVersion), transport.WithWork(n.aggWork))
	if err != nil {
		n.Close()
		return fmt.Errorf("neptune: listen for polls (PollPort): %w", err)
	}
	if n.cfg.MetricsAddr != "" {
		if err := n.serveMetrics(); err != nil {
			n.Close()
			return err
		}
	}
	n.client, err = newClient(ctx, clientParts{
		id:       n.cfg.ID,
		host:     n.cfg.Host,
		port:     n.cfg.GossipPort,
		join:     n.cfg.Join,
		interval: n.cfg.AnnounceInterval,
		ttl:      n.cfg.AnnounceTTL,
		balance:  n.cfg.Balance,
		announce: n.announcement,
		registry: reg,
		log:      n.log,
	})
	if err != nil {
		n.Close()
		return err
	}
	n.gossip = n.client.gossip
	if err := n.startReplication(); err != nil {
		n.Close()
		return err
	}
	n.log.Info("node started", "rpc", n.rpcLn.Addr().String(), "poll", n.polls.Addr(), "gossip", n.gossip.Addr(), "services", len(n.services))
	return nil
}

func (n *Node) serveMetrics() error {
	reg := n.cfg.Registry
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", n.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("neptune: listen for metrics (MetricsAddr %q): %w", n.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	n.httpLn = ln
	n.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = n.httpSrv.Serve(ln) }()
	return nil
}

// Client returns the node's own client, which shares its yellow pages.
func (n *Node) Client() *Client { return n.client }

// GossipAddr is the address other nodes and clients join.
func (n *Node) GossipAddr() string { return n.gossip.Addr() }

// RPCAddr is the gRPC address calls arrive on.
func (n *Node) RPCAddr() string { return n.rpcLn.Addr().String() }

// MetricsAddr is where /metrics is served, or "".
func (n *Node) MetricsAddr() string {
	if n.httpLn == nil {
		return ""
	}
	return n.httpLn.Addr().String()
}

// Close leaves the cluster, stops serving and fails queued requests. It is
// safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(n.close)
	return nil
}

func (n *Node) close() {
	n.stopReplication()
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
		case <-time.After(2 * time.Second):
			n.grpc.Stop()
		}
	}
	for _, h := range n.services {
		h.pool.Close()
	}
	n.log.Info("node stopped")
}

// announcement describes what this node hosts, for the yellow pages.
func (n *Node) announcement() *pb.Announcement {
	a := &pb.Announcement{RpcAddr: n.rpcLn.Addr().String(), PollAddr: n.polls.Addr(), MetricsAddr: n.MetricsAddr()}
	names := make([]string, 0, len(n.services))
	for name := range n.services {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := n.services[name]
		hs := &pb.HostedService{Name: name, Partitions: h.partitions, Replicas: n.replStatus(h)}
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
	if !ok || !slices.Contains(h.partitions, partition) {
		return 0, false
	}
	return h.pool.LoadFor(class), true
}

// lookup finds the method a request names, with the precise error if none.
func (n *Node) lookup(service string, partition int32, method string, mode Mode) (*hosted, *Method, error) {
	h, ok := n.services[service]
	if !ok {
		return nil, nil, fmt.Errorf("%w %q on node %s", nerr.ErrUnknownService, service, n.cfg.ID)
	}
	if !slices.Contains(h.partitions, partition) {
		return nil, nil, fmt.Errorf("%w %d of service %q on node %s", nerr.ErrUnknownPartition, partition, service, n.cfg.ID)
	}
	m, ok := h.methods[method]
	if !ok {
		return nil, nil, fmt.Errorf("%w %q in service %q", nerr.ErrUnknownMethod, method, service)
	}
	if mode != m.Mode {
		return nil, nil, fmt.Errorf("%w: %s.%s is %s, called as %s", nerr.ErrWrongMode, service, method, m.Mode, mode)
	}
	return h, m, nil
}

// nodeServer adapts the node to the generated gRPC interface.
type nodeServer struct {
	pb.UnimplementedNodeServer
	n *Node
}

func (s *nodeServer) Call(ctx context.Context, in *pb.CallRequest) (*pb.CallResponse, error) {
	start := time.Now()
	resp, err := s.n.serve(ctx, in)
	s.n.observe(in, start, err)
	if err != nil {
		return nil, transport.ToStatus(err)
	}
	return &pb.CallResponse{Body: resp.Body, Version: resp.Version}, nil
}

func (s *nodeServer) Stream(in *pb.CallRequest, stream grpc.ServerStreamingServer[pb.Chunk]) error {
	start := time.Now()
	err := s.n.serveStream(stream.Context(), in, func(b []byte) error { return stream.Send(&pb.Chunk{Body: b}) })
	s.n.observe(in, start, err)
	return transport.ToStatus(err)
}

func (n *Node) observe(in *pb.CallRequest, start time.Time, err error) {
	n.metrics.calls.WithLabelValues(in.Service, in.Method, errorCode(err)).Inc()
	n.metrics.latency.WithLabelValues(in.Service, in.Method).Observe(time.Since(start).Seconds())
}

func toRequest(in *pb.CallRequest) *Request {
	return &Request{Service: in.Service, Partition: int(in.Partition), Method: in.Method, Mode: Mode(in.Mode), Class: in.Class, Body: in.Body}
}

func (n *Node) serve(ctx context.Context, in *pb.CallRequest) (*Response, error) {
	h, m, err := n.lookup(in.Service, in.Partition, in.Method, Mode(in.Mode))
	if err != nil {
		return nil, err
	}
	if m.Handler == nil {
		return nil, fmt.Errorf("%w: %s.%s is a stream method; use Client.Stream", nerr.ErrWrongMode, in.Service, in.Method)
	}
	if h.svc.Replication != nil {
		return n.serveReplicated(ctx, h, m, in)
	}
	return h.serveLocal(ctx, m, in)
}

// serveLocal runs m's handler for in through the service's pool.
func (h *hosted) serveLocal(ctx context.Context, m *Method, in *pb.CallRequest) (*Response, error) {
	var resp *Response
	var herr error
	if err := h.run(ctx, in.Class, func(ctx context.Context) *Response {
		resp, herr = runHandler(ctx, m.Handler, toRequest(in))
		return resp
	}); err != nil {
		return nil, err
	}
	if herr != nil {
		return nil, herr
	}
	if resp == nil {
		resp = &Response{}
	}
	return resp, nil
}

func (n *Node) serveStream(ctx context.Context, in *pb.CallRequest, send func([]byte) error) error {
	h, m, err := n.lookup(in.Service, in.Partition, in.Method, Read)
	if err != nil {
		return err
	}
	if m.Stream == nil {
		return fmt.Errorf("%w: %s.%s is not a stream method; use Client.Call", nerr.ErrWrongMode, in.Service, in.Method)
	}
	var herr error
	if err := h.run(ctx, in.Class, func(ctx context.Context) *Response {
		defer recoverInto(&herr)
		herr = m.Stream(ctx, toRequest(in), send)
		return nil
	}); err != nil {
		return err
	}
	return herr
}

// runHandler calls h, turning a panic into an error so one bad request
// cannot take the node down.
func runHandler(ctx context.Context, h Handler, req *Request) (resp *Response, err error) {
	defer recoverInto(&err)
	return h(ctx, req)
}

func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("neptune: handler panicked: %v", r)
	}
}

// errorCode is the metrics label for an outcome.
func errorCode(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, nerr.ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, nerr.ErrOverloaded):
		return "overloaded"
	case errors.Is(err, nerr.ErrNoReplica):
		return "no_replica"
	case errors.Is(err, nerr.ErrUnknownService), errors.Is(err, nerr.ErrUnknownPartition),
		errors.Is(err, nerr.ErrUnknownMethod), errors.Is(err, nerr.ErrWrongMode):
		return "bad_request"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}
