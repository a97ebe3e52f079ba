package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/internal/obs"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// Caller is what the gateway needs of a Neptune client, which satisfies
// it: one call to a method of a service partition, sent to the replica
// Neptune's own balancer picks (the least loaded by its polls).
type Caller interface {
	Call(ctx context.Context, service string, partition int, method string, body []byte, opts ...neptune.CallOption) (*neptune.Response, error)
}

// Deps are what a gateway is given rather than builds: the cluster, the
// time source, where metrics go and where logs go.
type Deps struct {
	Caller Caller
	// Streams opens the streams of stream routes; nil: the Caller's
	// OpenStream if it has one (a *neptune.Client does).
	Streams Streamer
	// Clock is the scheduler's and the deadlines' time source (default
	// the wall clock); tests pass a manual one.
	Clock clock.Clock
	// Registerer receives the metrics; nil keeps them in a private
	// registry.
	Registerer prometheus.Registerer
	// Logger receives the gateway's logs; a request's lines carry its
	// request id (request_id).
	Logger *slog.Logger
	// TracerProvider receives a server span per request, child of the
	// W3C trace context the request carries (traceparent), parent of the
	// call's spans; nil turns tracing off, at no cost.
	TracerProvider trace.TracerProvider
	// Gossip authenticates the demand gossip with the other gateways:
	// the cluster's keys and the gateway's certificate (whose name is the
	// gateway's name: a config's name must match it, and defaults to
	// it), or Insecure. Required when the config has a gossip address.
	Gossip GossipSecurity
}

// Gateway is the HTTP front door: it routes each request to a service
// method, classifies it to the subscriber that pays for it, waits for its
// turn in the Gage scheduler and sends it with the Neptune client. It is
// an http.Handler; Serve runs it on a listener with the scheduler loop.
//
// What it measures. Each call names its subscriber (gRPC metadata) and
// the node answers, in the call's trailer, what the request used there:
// its handler thread's CPU time and storage bytes (converted to disk time
// at disk_bandwidth), the request and response message bytes, and an exec
// program's rusage; that is what Scheduler.Report is given. The trailer
// also carries the node's last accounting cycle (100 ms), from which
// gage.CapacityEstimator measures the cluster's capacity; the configured
// capacity is the declared one, used until reports arrive and for any
// resource they do not cover. A node that answers without usage (an older
// node) is charged what the gateway sees: the call's wall time as CPU and
// the bodies' bytes as network.
type Gateway struct {
	cfg      Config // with defaults
	routes   *routeTable
	classify *gage.Classifier
	unit     gage.Unit
	loop     *loop
	cluster  *cluster
	gossip   *gossiper // nil without peers
	pace     *pacer    // nil unless pace_responses
	metrics  *metrics
	caller   Caller
	streams  Streamer // nil: stream routes answer 502
	clk      clock.Clock
	log      *slog.Logger
	// traced is serveHTTP in a server span, nil when tracing is off.
	traced http.Handler

	// draining ends when Serve starts to drain; it ends every stream.
	draining  context.Context
	drain     context.CancelFunc
	streaming sync.WaitGroup // the streams being served

	retryAfter string
	// classOf is each subscriber's service class ("" for the route's).
	classOf map[string]string
}

// New builds a gateway from cfg (validated here).
func New(cfg Config, d Deps) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if d.Caller == nil {
		return nil, errors.New("gateway: Deps.Caller is nil")
	}
	cfg = cfg.WithDefaults()
	clk := clock.OrReal(d.Clock)
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = obs.Logger(log)
	reg := d.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	gc := cfg.Gage()
	cl, err := gage.NewClassifier(gc)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	sched, err := newScheduler(cfg.Scheduler, gc, gage.Options{Cycle: time.Duration(cfg.Cycle), MaxQueue: cfg.Queue, AccountingCycle: time.Duration(cfg.AccountingCycle)})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	sched.SetCapacity(clk.Now(), cfg.CapacityVector())
	m, err := newMetrics(reg, gc)
	if err != nil {
		return nil, err
	}
	var gsp *gossiper
	if cfg.Gossip != "" {
		if !d.Gossip.Insecure && (d.Gossip.Keys == nil || d.Gossip.Certs == nil) {
			return nil, errors.New("gateway: gossip is configured but Deps.Gossip has no keys or no certificate: give the cluster keyring's (security.Material.Keys) and the gateway's certificate (security.Material.TLS), or set Deps.Gossip.Insecure")
		}
		if !d.Gossip.Insecure {
			// The certificate names the gateway: its peers accept its
			// demand only under that name.
			id := d.Gossip.Certs.Identity()
			switch {
			case id.Role != pki.RoleGateway:
				return nil, fmt.Errorf("gateway: gossip needs a gateway certificate, and this one names %s (neptune tls cert create --gateway NAME, presented with --cert gateway/NAME)", id)
			case cfg.Name == "":
				cfg.Name = id.Name
			case cfg.Name != id.Name:
				return nil, fmt.Errorf("gateway: name: %q, but the gateway's certificate names gateway %q: its peers accept its demand only under that name", cfg.Name, id.Name)
			}
		}
		var subs []string
		for _, s := range gc.All() {
			subs = append(subs, s.Name)
		}
		if gsp, err = newGossiper(cfg, subs, d.Gossip, clk, log); err != nil {
			return nil, fmt.Errorf("gateway: gossip %q: %w", cfg.Gossip, err)
		}
		gsp.dropped = func(reason string) { m.gossipDropped.WithLabelValues(reason).Inc() }
		gsp.accepted = m.gossipAccepted.Inc
		if d.Gossip.Insecure {
			log.Warn("gateway: demand gossip runs INSECURE: anyone reaching the gossip port can steer how reservations are split", "gossip", cfg.Gossip)
		}
		if cfg.Name == "" {
			cfg.Name = gsp.Addr()
			gsp.self = cfg.Name
		}
	}
	view, err := newCluster(cfg, gc, log)
	if err != nil {
		if gsp != nil {
			gsp.conn.Close()
		}
		return nil, fmt.Errorf("gateway: %w", err)
	}
	pace, err := newPacer(cfg, clk, view.share)
	if err != nil {
		if gsp != nil {
			gsp.conn.Close()
		}
		return nil, fmt.Errorf("gateway: %w", err)
	}
	classOf := map[string]string{}
	for _, s := range gc.Subscribers {
		classOf[s.Name] = s.Class
	}
	streams := d.Streams
	if s, ok := d.Caller.(Streamer); ok && streams == nil {
		streams = s
	}
	g := &Gateway{
		cfg: cfg, routes: newRouteTable(cfg.Routes, time.Duration(cfg.Timeout)), classify: cl,
		unit: gc.UnitOrDefault(), loop: newLoop(clk, sched, m, view, time.Duration(cfg.GossipPeriod), time.Duration(cfg.AccountingCycle)), cluster: view,
		gossip: gsp, metrics: m, caller: d.Caller, streams: streams, clk: clk, log: log, pace: pace,
		retryAfter: strconv.Itoa(max(1, int(math.Ceil(time.Duration(cfg.RetryAfter).Seconds())))),
		classOf:    classOf,
	}
	g.draining, g.drain = context.WithCancel(context.Background())
	if d.TracerProvider != nil {
		g.traced = otelhttp.NewHandler(http.HandlerFunc(g.serveHTTP), "neptune.gateway",
			otelhttp.WithTracerProvider(d.TracerProvider), otelhttp.WithPropagators(obs.Propagator),
			otelhttp.WithMeterProvider(noopmetric.NewMeterProvider()),
			otelhttp.WithSpanNameFormatter(func(op string, _ *http.Request) string { return op }))
	}
	return g, nil
}

func newScheduler(kind string, gc gage.Config, opt gage.Options) (gage.Scheduler, error) {
	switch kind {
	case "tag":
		return gage.NewTag(gc, opt)
	case "fifo":
		return gage.NewFIFO(gc, opt)
	}
	return gage.NewCredit(gc, opt)
}

// Run runs the scheduler loop, and the demand gossip with the peers,
// until ctx ends. Requests are only served while it runs; Serve runs it
// itself.
func (g *Gateway) Run(ctx context.Context) {
	if g.gossip != nil {
		gctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { g.gossip.run(gctx, g.cluster.out, g.loop.merge); close(done) }()
		defer func() { stop(); <-done }()
	}
	g.loop.run(ctx)
}

// Name is this gateway's name among its peers ("" without gossip).
func (g *Gateway) Name() string {
	if g.gossip == nil {
		return ""
	}
	return g.gossip.self
}

// GossipAddr is the UDP address this gateway gossips on ("" without).
func (g *Gateway) GossipAddr() string {
	if g.gossip == nil {
		return ""
	}
	return g.gossip.Addr()
}

// Serve serves HTTP on ln, with the scheduler loop, until ctx ends; then
// it drains: it stops accepting, lets the requests in flight (queued ones
// included) finish within the drain bound, and returns. Requests still
// running after the bound are cancelled, and Serve says so.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	loopCtx, stopLoop := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() { g.Run(loopCtx); close(loopDone) }()
	defer func() { stopLoop(); <-loopDone }()

	// Requests do not inherit ctx: its end starts the drain, which must
	// let them finish. abort cancels them once the drain bound passes.
	base, abort := context.WithCancel(context.Background())
	defer abort()
	var protos http.Protocols
	protos.SetHTTP1(true)
	tls := g.cfg.TLS.Cert != ""
	if tls {
		protos.SetHTTP2(true)
	} else {
		protos.SetUnencryptedHTTP2(true) // h2c with prior knowledge
	}
	srv := &http.Server{
		Handler:           g,
		Protocols:         &protos,
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() {
		if tls {
			errc <- srv.ServeTLS(ln, g.cfg.TLS.Cert, g.cfg.TLS.Key)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: %w", err)
	case <-ctx.Done():
	}
	g.log.Info("gateway draining", "bound", time.Duration(g.cfg.Drain))
	dctx, cancel := clock.WithTimeout(context.Background(), g.clk, time.Duration(g.cfg.Drain))
	defer cancel()
	// Streams last as long as their clients like: they end now, each
	// with its last frame (WebSockets, hijacked, are not Shutdown's to
	// wait for, so the gateway waits for its streams itself).
	g.drain()
	err := srv.Shutdown(dctx)
	<-errc // http.ErrServerClosed, at once
	if err == nil {
		done := make(chan struct{})
		go func() { g.streaming.Wait(); close(done) }()
		select {
		case <-done:
		case <-dctx.Done():
			err = dctx.Err()
		}
	}
	if err != nil {
		abort()
		srv.Close()
		return fmt.Errorf("gateway: drain: requests still running after %v were cancelled: %w", time.Duration(g.cfg.Drain), err)
	}
	return nil
}

// statusClientGone is recorded (never sent) for a request whose client
// went away first, after nginx's convention.
const statusClientGone = 499

// failFastOnOverload keeps the client's retries of failover but answers a
// node's overload at once: the 503 and its Retry-After tell the HTTP
// caller to back off, where a retry here would hold its request (and its
// body) until the deadline.
var failFastOnOverload = neptune.WithRetry(neptune.RetryPolicy{FailFastOnOverload: true})

// ServeHTTP serves one request. The checks go from the cheapest and least
// revealing to the costliest: route (404, 405), key and subscriber (401,
// 403), declared size (413), partition key (400), the body itself (413),
// the subscriber's turn (429, 504), then the call (the service's answer,
// or 404, 502, 503, 504).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.traced != nil {
		g.traced.ServeHTTP(w, r)
		return
	}
	g.serveHTTP(w, r)
}

// serveHTTP is ServeHTTP in the request's span if traced.
func (g *Gateway) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := g.clk.Now()
	r = g.identify(w, r)
	code := g.serve(w, r, start)
	g.metrics.onResponse(code, g.clk.Since(start).Seconds())
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, start time.Time) int {
	rt, allow := g.routes.match(r.Host, r.URL.Path, r.Method)
	if rt == nil {
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			return g.fail(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed here")
		}
		return g.fail(w, http.StatusNotFound, "no route for this host and path")
	}
	key, bearer := g.apiKey(r)
	sub, err := g.classify.Classify(r.Host, r.URL.Path, key)
	if err != nil {
		return g.fail(w, http.StatusUnauthorized, "unknown API key")
	}
	if !rt.allows(sub) {
		if key == "" {
			return g.fail(w, http.StatusUnauthorized, "this route needs an API key")
		}
		return g.fail(w, http.StatusForbidden, "this API key may not use this route")
	}
	g.metrics.onDemand(sub)
	if rt.Stream {
		part, err := rt.Partition.partition(r)
		if err != nil {
			return g.fail(w, http.StatusBadRequest, err.Error())
		}
		return g.serveStream(w, r, rt, sub, part, start)
	}
	limit := int64(g.cfg.MaxBody)
	if r.ContentLength > limit {
		return g.fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", limit))
	}
	part, err := rt.Partition.partition(r)
	if err != nil {
		return g.fail(w, http.StatusBadRequest, err.Error())
	}
	affinity, err := rt.Affinity.key(r)
	if err != nil {
		return g.fail(w, http.StatusBadRequest, err.Error())
	}
	// A client that trickles its body is held to the request's timeout
	// (on the socket, so in real time), and the deadline is lifted once
	// the body is in: left set, it would end the server's background read
	// and cancel the request as if the client had gone. Recorders in tests
	// do not support deadlines, which is harmless.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(rt.timeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return g.fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", limit))
		}
		return g.fail(w, http.StatusBadRequest, "could not read the body")
	}
	payload := body
	if rt.Passthrough {
		if payload, err = g.frame(r, sub, body, bearer); err != nil {
			return g.fail(w, http.StatusBadRequest, "request cannot be forwarded: "+err.Error())
		}
	}

	// The deadline runs from arrival: the wait for the turn counts.
	ctx, cancel := clock.WithDeadline(r.Context(), g.clk, start.Add(rt.timeout))
	defer cancel()
	if err := g.loop.wait(ctx, sub, time.Duration(g.cfg.MaxWait)); err != nil {
		return g.refused(w, r, rt, sub, err)
	}
	sent := g.clk.Now()
	var cu neptune.CallUsage
	class := rt.Class
	if c := g.classOf[sub]; c != "" {
		class = c
	}
	resp, err := g.caller.Call(transport.WithSubscriber(ctx, sub), rt.Service, part, rt.Method, payload,
		neptune.WithClass(class), neptune.WithUsage(&cu), neptune.WithAffinity(affinity), failFastOnOverload)
	var used gage.Vector
	if cu.Node != "" && *g.cfg.Measured {
		// What the node measured (see Gateway's doc), and its cycle.
		used = g.cluster.usage(cu.Usage)
		g.loop.load(nodeLoad{node: cu.Node, load: cu.Load})
	} else {
		used = gage.Res(g.clk.Since(sent), 0, int64(len(payload)))
		if resp != nil {
			used[gage.Net] += float64(len(resp.Body))
		}
	}
	g.loop.done(gage.Usage{Subscriber: sub, Requests: 1, Used: used})
	g.metrics.onUsed(sub, g.unit, used)
	if err != nil {
		return g.callFailed(w, r, rt, sub, err)
	}
	if rt.Passthrough {
		return g.relay(w, r, rt, sub, resp.Body)
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(http.StatusOK)
	return g.send(r.Context(), w, sub, http.StatusOK, resp.Body)
}

// apiKey returns the request's API key, "" if it presents none, and
// whether it came as a bearer token.
func (g *Gateway) apiKey(r *http.Request) (key string, bearer bool) {
	if *g.cfg.APIKey.Bearer {
		if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			return strings.TrimSpace(a[7:]), true
		}
	}
	return r.Header.Get(g.cfg.APIKey.Header), false
}

// HeaderSubscriber tells the program behind a passthrough route which
// subscriber a request was classified to; a client's own is replaced.
const HeaderSubscriber = "Neptune-Subscriber"

// frame builds the message/http request a passthrough method takes (see
// adapter.MarshalRequest): the client's method, target, Host, headers and
// body, less the hop-by-hop headers and the API key (it authenticates the
// client to the gateway and is nothing the program should see), plus the
// usual X-Forwarded-* and the subscriber.
func (g *Gateway) frame(r *http.Request, sub string, body []byte, bearer bool) ([]byte, error) {
	h := r.Header.Clone()
	adapter.RemoveHopHeaders(h)
	h.Del(g.cfg.APIKey.Header)
	if bearer {
		h.Del("Authorization")
	}
	h.Set(HeaderSubscriber, sub)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := h.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		h.Set("X-Forwarded-For", ip)
	}
	h.Set("X-Forwarded-Host", r.Host)
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	h.Set("X-Forwarded-Proto", proto)
	return adapter.MarshalRequest(r.Method, r.URL.RequestURI(), r.Host, h, body)
}

// relay answers with the program's framed response.
func (g *Gateway) relay(w http.ResponseWriter, r *http.Request, rt *route, sub string, msg []byte) int {
	status, h, body, err := adapter.UnmarshalResponse(msg, r.Method)
	if err != nil {
		g.log.WarnContext(r.Context(), "gateway: malformed answer from a passthrough method", "route", rt.field, "service", rt.Service, "method", rt.Method, "subscriber", sub, "err", err)
		return g.fail(w, http.StatusBadGateway, "malformed answer from the service")
	}
	adapter.RemoveHopHeaders(h)
	out := w.Header()
	id := out.Get(obs.HeaderRequestID)
	for k, vs := range h {
		out[k] = vs
	}
	if id != "" {
		out.Set(obs.HeaderRequestID, id) // the gateway's, which its logs carry
	}
	w.WriteHeader(status)
	return g.send(r.Context(), w, sub, status, body)
}

// send writes a response's body, paced if the gateway paces responses,
// and returns the status to record: status, or 499 if the client went
// away while its response was being paced.
func (g *Gateway) send(ctx context.Context, w http.ResponseWriter, sub string, status int, body []byte) int {
	held, err := g.pace.write(ctx, w, sub, body)
	if held > 0 {
		g.metrics.onPaced(sub, held)
	}
	if err != nil && ctx.Err() != nil {
		return statusClientGone
	}
	return status
}

// refused answers a request that never had its turn.
func (g *Gateway) refused(w http.ResponseWriter, r *http.Request, rt *route, sub string, err error) int {
	g.log.DebugContext(r.Context(), "gateway: refused", "route", rt.field, "subscriber", sub, "err", err)
	status, text, why := refusal(err)
	if why == "" && r.Context().Err() != nil {
		return statusClientGone
	}
	if why != "" {
		g.metrics.onDrop(sub, why)
	}
	return g.fail(w, status, text)
}

// refusal is the status and reason of a request (or a stream's message)
// refused its turn with err, and the drop it counts as ("" for none).
func refusal(err error) (status int, text, why string) {
	switch {
	case errors.Is(err, gage.ErrQueueFull):
		return http.StatusTooManyRequests, "over the subscriber's share, and no spare capacity: queue full", dropQueueFull
	case errors.Is(err, errOverShare):
		return http.StatusTooManyRequests, "over the subscriber's share, and no spare capacity: no turn in time", dropOverShare
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "deadline passed while waiting for a turn", dropDeadline
	}
	return http.StatusServiceUnavailable, "gateway shutting down", ""
}

// StatusOf is the HTTP status a failed call is answered with:
//
//	400  the handler's own error of kind ErrBadRequest (a malformed request)
//	404  ErrUnknownService, ErrUnknownMethod, ErrUnknownPartition; the
//	     handler's own error of kind ErrNotFound
//	503  ErrNoReplica, ErrNoPrimary, ErrOverloaded, ErrClosed (with Retry-After)
//	504  ErrDeadline, the request's deadline
//	502  anything else: the service failed, or the route names a method
//	     of the other kind (a stream method on a route without stream:
//	     true, or the reverse: ErrWrongMode)
func StatusOf(err error) int {
	is := func(targets ...error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
	switch {
	case is(neptune.ErrBadRequest):
		return http.StatusBadRequest
	case is(neptune.ErrUnknownService, neptune.ErrUnknownMethod, neptune.ErrUnknownPartition, neptune.ErrNotFound):
		return http.StatusNotFound
	case is(neptune.ErrNoReplica, neptune.ErrNoPrimary, neptune.ErrOverloaded, neptune.ErrClosed):
		return http.StatusServiceUnavailable
	case is(neptune.ErrDeadline, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// callFailed answers a request whose call failed.
func (g *Gateway) callFailed(w http.ResponseWriter, r *http.Request, rt *route, sub string, err error) int {
	if r.Context().Err() != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, neptune.ErrDeadline) {
		return statusClientGone
	}
	code := StatusOf(err)
	g.log.DebugContext(r.Context(), "gateway: call failed", "route", rt.field, "service", rt.Service, "method", rt.Method, "subscriber", sub, "status", code, "err", err)
	var msg string
	var remote *transport.RemoteError
	switch {
	case errors.As(err, &remote):
		// The handler's own answer: its words, for the caller (never the
		// node it came from).
		msg = remote.Message
		if code == http.StatusBadGateway {
			msg = "the service failed: " + msg
		}
		return g.fail(w, code, msg)
	}
	switch code {
	case http.StatusNotFound:
		msg = "no such service, method or partition"
	case http.StatusServiceUnavailable:
		msg = "service unavailable: no replica, no primary, or overloaded"
	case http.StatusGatewayTimeout:
		msg = "deadline passed"
	default:
		msg = "the service failed"
	}
	return g.fail(w, code, msg)
}

// identify gives the request its request id: the caller's X-Request-Id
// if it is a valid one (obs.ValidRequestID), else its trace id if traced,
// else a new one. The response names it in X-Request-Id, an error's body
// too, and so do the logs of the gateway and of every node the call
// reaches.
func (g *Gateway) identify(w http.ResponseWriter, r *http.Request) *http.Request {
	ctx := r.Context()
	id := r.Header.Get(obs.HeaderRequestID)
	if !obs.ValidRequestID(id) {
		id = obs.NewRequestID(ctx)
	}
	w.Header().Set(obs.HeaderRequestID, id)
	trace.SpanFromContext(ctx).SetAttributes(attribute.String(obs.LogKey, id))
	return r.WithContext(obs.WithRequestID(ctx, id))
}

// fail writes an error answer: a short plain-text reason naming the
// request id, and the headers the status calls for. Messages are the
// gateway's own, never a key or a node's address.
func (g *Gateway) fail(w http.ResponseWriter, code int, msg string) int {
	h := w.Header()
	if id := h.Get(obs.HeaderRequestID); id != "" {
		msg += " (request_id " + id + ")"
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	switch code {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		h.Set("Retry-After", g.retryAfter)
	case http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Bearer realm="neptune"`)
	}
	w.WriteHeader(code)
	io.WriteString(w, msg+"\n")
	return code
}
