package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/gage"
)

// Config is the gateway's config file (YAML; see examples/gateway.yaml).
// Unknown keys are errors, and every validation error names the key in
// the file's own spelling, such as "routes[1].partition.count", so an
// operator finds the line to fix.
type Config struct {
	// Listen is the address of the HTTP listener (default ":8080").
	Listen string `yaml:"listen"`
	// Metrics, if set, is a separate listener serving /metrics: scrapes
	// then never compete with client traffic, and the metrics need not be
	// exposed where the clients are.
	Metrics string `yaml:"metrics"`
	// Join lists gossip addresses of cluster nodes.
	Join []string `yaml:"join"`
	// TLS serves HTTPS (HTTP/1.1 and HTTP/2 by ALPN) when both files are
	// set; otherwise the listener speaks plaintext HTTP/1.1 and HTTP/2
	// with prior knowledge (h2c).
	TLS TLSConfig `yaml:"tls"`
	// MaxBody is the largest request body accepted (default 1 MiB).
	MaxBody ByteSize `yaml:"max_body"`
	// Timeout bounds a request from its arrival to its answer, the wait
	// for its turn included (default 10s); a route may set its own.
	Timeout Duration `yaml:"timeout"`
	// MaxWait bounds the wait for a request's turn (default 1s): a
	// request still queued then is answered 429, as its subscriber is
	// over its share and there is no spare to serve it.
	MaxWait Duration `yaml:"max_wait"`
	// RetryAfter is the Retry-After of 429 and 503 answers (default 1s,
	// rounded up to whole seconds).
	RetryAfter Duration `yaml:"retry_after"`
	// Drain bounds the graceful shutdown (default 10s): requests in
	// flight, queued ones included, have this long to finish.
	Drain Duration `yaml:"drain"`
	// APIKey says where requests present their API key.
	APIKey APIKeyConfig `yaml:"api_key"`
	// Scheduler is credit (Gage's, the default), tag (mClock-style) or
	// fifo (reservations off).
	Scheduler string `yaml:"scheduler"`
	// Cycle is the scheduling cycle (default 10ms) and Queue the bound of
	// each subscriber's queue (default 256).
	Cycle Duration `yaml:"cycle"`
	Queue int      `yaml:"queue"`
	// Unit is the generic request (default: 10ms CPU, 10ms disk, 2000
	// bytes of network, the paper's).
	Unit *Resources `yaml:"unit"`
	// CapacityGRPS or Capacity (one of them) is what the cluster serves
	// per second, until nodes report their measured capacity: in generic
	// requests per second, or per resource.
	CapacityGRPS float64    `yaml:"capacity_grps"`
	Capacity     *Resources `yaml:"capacity"`
	// Subscribers are the tenants, as internal/gage defines them:
	// name, reservation and limit in GRPS, Host/path rules, API key
	// digests.
	Subscribers []gage.Subscriber `yaml:"subscribers"`
	// Routes map requests to service methods.
	Routes []Route `yaml:"routes"`
	// Streams bounds the bidirectional streams of stream routes.
	Streams StreamsConfig `yaml:"streams"`

	// DiskBandwidth converts the disk bytes nodes report per request into
	// disk time, the GRU's disk dimension (default 100MB, per second).
	DiskBandwidth ByteSize `yaml:"disk_bandwidth"`
	// Measured: node reports (thread CPU, disk, network per request, and
	// each node's accounting cycle) replace the gateway's own wall-time
	// stand-in and drive the capacity estimate; the configured capacity
	// is then the declared one, used until reports arrive and for any
	// resource they say nothing of. Default true; false keeps the
	// gateway's own measure and the configured capacity.
	Measured *bool `yaml:"measured"`
	// MeasuredCapacity: whether the nodes' reports drive the capacity
	// estimate (default: as Measured). False with Measured true charges
	// requests what the nodes measured and paces to the configured
	// capacity, for a cluster whose capacity is known better than its
	// nodes can measure it: nodes sharing a machine with other work (CPU
	// busy is the machine's), or a disk_bandwidth that is a model rather
	// than the device's.
	MeasuredCapacity *bool `yaml:"measured_capacity"`
	// AccountingCycle, if set, holds the usage each answer carries and
	// hands it to the scheduler summed per subscriber once a cycle, the
	// feedback of the paper's RPNs (§3.4), over which the scheduler also
	// averages its cost prediction. Default 0: each answer's usage reaches
	// the scheduler as it arrives, which keeps a reservation closer
	// (docs/experiments/gage.md, Fig 3); a cycle is for reproducing the
	// paper's figure.
	AccountingCycle Duration `yaml:"accounting_cycle"`

	// PaceResponses paces each reserved subscriber's response bytes on
	// the way out (gage.Shaper) at PaceHeadroom (default 1.25) times the
	// larger of its reservation's network rate and its recent rate, a
	// chunk never held more than PaceMaxDelay (default 1s). It keeps a
	// reservation's network usage within a few percent over 1 s windows
	// on a web-like mix, where whole responses sent at once deviate about
	// 9% (docs/experiments/gage.md, Fig 6); the price is latency on large
	// responses (100 KB at 100 GRPS: about 0.4 s). Default off.
	PaceResponses bool     `yaml:"pace_responses"`
	PaceHeadroom  float64  `yaml:"pace_headroom"`
	PaceMaxDelay  Duration `yaml:"pace_max_delay"`

	// Several gateways: Name identifies this one to its peers (secured:
	// the name its gateway certificate gives, which it must equal if set;
	// insecure: default the gossip address as bound); Gossip is the UDP address it exchanges demand
	// on; Peers are other gateways' gossip addresses (a peer that sends
	// to this one is answered too, so one side listing the other is
	// enough). Every GossipPeriod (default 100ms) each gateway sends its
	// demand per subscriber and re-splits the reservations; a peer not
	// heard from for PeerTTL (default 1s) is dead and its share returns.
	Name         string   `yaml:"name"`
	Gossip       string   `yaml:"gossip"`
	Peers        []string `yaml:"peers"`
	GossipPeriod Duration `yaml:"gossip_period"`
	PeerTTL      Duration `yaml:"peer_ttl"`
}

// Defaults of the multi-gateway and accounting settings.
const (
	DefaultDiskBandwidth = 100_000_000
	DefaultGossipPeriod  = 100 * time.Millisecond
	DefaultPeerTTL       = time.Second
)

// TLSConfig names the certificate and key files (PEM).
type TLSConfig struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// APIKeyConfig says where a request's API key is read from.
type APIKeyConfig struct {
	// Header carries the key (default X-API-Key).
	Header string `yaml:"header"`
	// Bearer also takes the key from "Authorization: Bearer <key>"
	// (default true). Turn it off when the programs behind the gateway
	// use bearer tokens of their own.
	Bearer *bool `yaml:"bearer"`
}

// Resources is an amount of each resource Gage schedules: CPU and disk
// time, network bytes. As Unit it is one generic request; as Capacity it
// is per second (cpu: 2s is two cores' worth).
type Resources struct {
	CPU  Duration `yaml:"cpu"`
	Disk Duration `yaml:"disk"`
	Net  ByteSize `yaml:"net"`
}

// Vector is r as internal/gage counts it.
func (r Resources) Vector() gage.Vector {
	return gage.Res(time.Duration(r.CPU), time.Duration(r.Disk), int64(r.Net))
}

// Route maps requests to one method of one service. A request matches
// when its Host, path and method all match; the most specific route wins:
// an exact host before a wildcard (the longer suffix first) before a route
// without host, then the longer path prefix, then a route naming the
// request's method before one taking any.
type Route struct {
	// Host is an exact host ("api.example.com") or a wildcard over its
	// subdomains ("*.example.com"); empty matches any. Compared without
	// port, case and trailing dot.
	Host string `yaml:"host"`
	// PathPrefix matches on a segment boundary ("/kv" matches /kv and
	// /kv/x, not /kvx; "/kv/" matches everything under it); empty is "/".
	PathPrefix string `yaml:"path_prefix"`
	// Methods are the HTTP methods routed; empty takes any.
	Methods []string `yaml:"methods"`
	// Service and Method are the Neptune service and method called.
	Service string `yaml:"service"`
	Method  string `yaml:"method"`
	// Partition says which partition a request goes to (default 0).
	Partition PartitionSpec `yaml:"partition"`
	// Affinity says where a request's affinity key is: calls with the
	// same key go to the same replica of the partition while its load
	// allows (the "affinity" balancing policy, which the route's service
	// then uses; calls without a key are balanced as by the default).
	Affinity AffinitySpec `yaml:"affinity"`
	// Balance names the load-balancing policy of the calls to the
	// route's service (one of neptune.BalancingPolicies(), as the node's
	// balance.policy), like Envoy's per-cluster lb_policy: the policy is
	// the service's, so every route naming the service must agree (or
	// leave it empty). Default: affinity when a route of the service
	// reads an affinity key, else the gateway's default (prequal).
	Balance string `yaml:"balance"`
	// Passthrough sends the whole HTTP request (method, path, query,
	// headers, body) to a passthrough method of an HTTP-adapter service
	// and answers with the program's whole response; otherwise the request
	// body is the call's body and the response body the answer's.
	Passthrough bool `yaml:"passthrough"`
	// Subscribers, if set, are the only subscribers this route serves;
	// others get 403 (401 without a key).
	Subscribers []string `yaml:"subscribers"`
	// Class is the Neptune service class of the calls ("" is the
	// service's default class).
	Class string `yaml:"class"`
	// Timeout overrides the gateway's Timeout for this route; on a
	// stream route it bounds the whole stream instead of
	// streams.max_duration.
	Timeout Duration `yaml:"timeout"`
	// Stream routes to a stream method (read or write): the request is a
	// bidirectional stream of messages, a POST whose body and answer are
	// newline-delimited JSON frames, or a WebSocket (docs/architecture/
	// gateway.md, "Streams"). The open and every message take a turn.
	Stream bool `yaml:"stream"`
}

// StreamsConfig bounds the streams of stream routes.
type StreamsConfig struct {
	// MaxMessage bounds one frame as the client sends it (a line, or a
	// WebSocket message), default 1 MiB: a bigger one is refused (over
	// WebSocket it closes the connection, status 1009).
	MaxMessage ByteSize `yaml:"max_message"`
	// Idle ends a stream on which no message went either way for this
	// long (default 1m).
	Idle Duration `yaml:"idle"`
	// MaxDuration bounds a stream from its arrival (default 1h); a
	// route's timeout replaces it.
	MaxDuration Duration `yaml:"max_duration"`
	// Origins are the host patterns (path.Match, as "*.example.com") of
	// the web pages allowed to open a WebSocket besides the gateway's
	// own host; a browser's cross-origin handshake is refused otherwise.
	Origins []string `yaml:"origins"`
}

// AffinitySpec names a request's affinity key: a path segment (1-based,
// as PartitionSpec's), a header or a query parameter. A request without
// it is balanced as any.
type AffinitySpec struct {
	Segment int    `yaml:"segment"`
	Header  string `yaml:"header"`
	Query   string `yaml:"query"`
}

// Balancing is the balancing policy of each service a route names one
// for (Route.Balance), or affinity for a service some route reads an
// affinity key of: the gateway's client's ServiceBalance. Other services
// take the client's default. Validate refuses routes that disagree.
func (c *Config) Balancing() map[string]balance.Config {
	out := map[string]balance.Config{}
	for _, r := range c.Routes {
		switch {
		case r.Balance != "":
			out[r.Service] = balance.Config{Policy: r.Balance}
		case r.Affinity != (AffinitySpec{}):
			if _, set := out[r.Service]; !set {
				out[r.Service] = balance.Config{Policy: balance.NameAffinity}
			}
		}
	}
	return out
}

// PartitionSpec picks a request's partition: a number read from a path
// segment, a header or a query parameter, the hash of such a key, or a
// fixed number. Written as a number (partition: 3) it is Fixed.
type PartitionSpec struct {
	// Segment is the 1-based index of a path segment: with segment: 2,
	// /kv/7/x reads "7".
	Segment int `yaml:"segment"`
	// Header and Query name a header or a query parameter.
	Header string `yaml:"header"`
	Query  string `yaml:"query"`
	// Hash makes the value a key: the partition is its FNV-1a hash
	// modulo Count, the same on every gateway and across restarts.
	// Without Hash the value is the partition number itself.
	Hash bool `yaml:"hash"`
	// Count is the number of partitions: required with Hash; otherwise,
	// if set, a number at or above it is a bad key (400).
	Count int `yaml:"count"`
	// Fixed sends every request to this partition.
	Fixed *int `yaml:"fixed"`
}

// UnmarshalYAML accepts a number (a fixed partition) or the mapping.
func (p *PartitionSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		v, err := strconv.Atoi(n.Value)
		if err != nil {
			return fmt.Errorf("line %d: partition %q is neither a number nor a mapping like {segment: 2}", n.Line, n.Value)
		}
		*p = PartitionSpec{Fixed: &v}
		return nil
	}
	type plain PartitionSpec
	return n.Decode((*plain)(p))
}

// Duration and ByteSize are the shared config types (internal/config).
type (
	Duration = config.Duration
	ByteSize = config.Size
)

// ParseByteSize parses "1MiB", "64KiB", "2MB", "512B" or a plain number.
var ParseByteSize = config.ParseSize

// Defaults.
const (
	DefaultListen     = ":8080"
	DefaultMaxBody    = 1 << 20
	DefaultTimeout    = 10 * time.Second
	DefaultMaxWait    = time.Second
	DefaultRetryAfter = time.Second
	DefaultDrain      = 10 * time.Second
	DefaultKeyHeader  = "X-API-Key"
	// Streams' defaults.
	DefaultMaxMessage        = 1 << 20
	DefaultStreamIdle        = time.Minute
	DefaultStreamMaxDuration = time.Hour
	// maxBodyLimit keeps a framed request within what one Neptune call
	// carries (64 MiB gRPC messages), with room for the headers.
	maxBodyLimit = 32 << 20
)

// Schedulers are the values of Config.Scheduler.
var Schedulers = []string{"credit", "tag", "fifo"}

// ReadConfig reads and validates a config file.
func ReadConfig(path string) (Config, error) {
	c, err := LoadConfig(path)
	if err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// LoadConfig reads a config file without validating it, for callers that
// apply overrides (command-line flags) first and validate the result.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := DecodeConfig(b)
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes YAML and validates it.
func ParseConfig(b []byte) (Config, error) {
	c, err := DecodeConfig(b)
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

// DecodeConfig decodes YAML, unknown keys being errors, without
// validating the values.
func DecodeConfig(b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	// An empty document (io.EOF) goes on to Validate, which says what is
	// missing.
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("gateway config: %w", err)
	}
	return c, nil
}

// WithDefaults fills the zero fields with their defaults.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	def := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	def(&c.Timeout, DefaultTimeout)
	def(&c.MaxWait, DefaultMaxWait)
	def(&c.RetryAfter, DefaultRetryAfter)
	def(&c.Drain, DefaultDrain)
	if c.APIKey.Header == "" {
		c.APIKey.Header = DefaultKeyHeader
	}
	if c.APIKey.Bearer == nil {
		t := true
		c.APIKey.Bearer = &t
	}
	if c.Scheduler == "" {
		c.Scheduler = "credit"
	}
	if c.DiskBandwidth == 0 {
		c.DiskBandwidth = DefaultDiskBandwidth
	}
	if c.Measured == nil {
		t := true
		c.Measured = &t
	}
	if c.MeasuredCapacity == nil {
		c.MeasuredCapacity = c.Measured
	}
	def(&c.GossipPeriod, DefaultGossipPeriod)
	if c.Streams.MaxMessage == 0 {
		c.Streams.MaxMessage = DefaultMaxMessage
	}
	def(&c.Streams.Idle, DefaultStreamIdle)
	def(&c.Streams.MaxDuration, DefaultStreamMaxDuration)
	def(&c.PeerTTL, DefaultPeerTTL)

	return c
}

// Gage is the subscriber table for internal/gage.
func (c Config) Gage() gage.Config {
	g := gage.Config{Subscribers: c.Subscribers}
	if c.Unit != nil {
		g.Unit = gage.Unit(c.Unit.Vector())
	}
	return g
}

// CapacityVector is the configured capacity per second, per resource.
func (c Config) CapacityVector() gage.Vector {
	if c.Capacity != nil {
		return c.Capacity.Vector()
	}
	return c.Gage().UnitOrDefault().Times(c.CapacityGRPS)
}

// Validate reports every problem at once (errors.Join of
// *gage.FieldError, each naming its YAML key).
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &gage.FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	for _, a := range []struct{ field, addr string }{{"listen", c.Listen}, {"metrics", c.Metrics}} {
		if a.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			bad(a.field, "%q is not host:port (or :port)", a.addr)
		}
	}
	for i, p := range c.Peers {
		if _, _, err := net.SplitHostPort(p); err != nil {
			bad(fmt.Sprintf("peers[%d]", i), "%q is not host:port", p)
		}
	}
	if len(c.Peers) > 0 && c.Gossip == "" {
		bad("gossip", "is required with peers: the UDP address this gateway gossips on")
	}
	if c.DiskBandwidth < 0 {
		bad("disk_bandwidth", "must be >= 0, got %d", c.DiskBandwidth)
	}
	gp := c.GossipPeriod
	if gp == 0 {
		gp = Duration(DefaultGossipPeriod)
	}
	if c.GossipPeriod < 0 || c.PeerTTL < 0 || (c.PeerTTL > 0 && c.PeerTTL < 2*gp) {
		bad("peer_ttl", "must be at least two gossip periods (%v), or a live peer looks dead after one lost datagram", time.Duration(2*gp))
	}
	for i, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			bad(fmt.Sprintf("join[%d]", i), "%q is not host:port", j)
		}
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		bad("tls", "set both cert and key, or neither")
	}
	if c.MaxBody < 0 || c.MaxBody > maxBodyLimit {
		bad("max_body", "must be between 0 (default 1MiB) and 32MiB, got %d", c.MaxBody)
	}
	for _, d := range []struct {
		field string
		v     Duration
	}{{"timeout", c.Timeout}, {"max_wait", c.MaxWait}, {"retry_after", c.RetryAfter}, {"drain", c.Drain}, {"cycle", c.Cycle}, {"accounting_cycle", c.AccountingCycle},
		{"streams.idle", c.Streams.Idle}, {"streams.max_duration", c.Streams.MaxDuration}} {
		if d.v < 0 {
			bad(d.field, "must be >= 0, got %v", time.Duration(d.v))
		}
	}
	if c.Streams.MaxMessage < 0 || c.Streams.MaxMessage > maxBodyLimit {
		bad("streams.max_message", "must be between 0 (default 1MiB) and 32MiB, got %d", c.Streams.MaxMessage)
	}
	for i, o := range c.Streams.Origins {
		if _, err := path.Match(o, ""); err != nil || o == "" {
			bad(fmt.Sprintf("streams.origins[%d]", i), "%q is not a host pattern like *.example.com", o)
		}
	}
	if c.APIKey.Header != "" && !httpguts.ValidHeaderFieldName(c.APIKey.Header) {
		bad("api_key.header", "%q is not a header name", c.APIKey.Header)
	}
	if c.Scheduler != "" && !slices.Contains(Schedulers, c.Scheduler) {
		bad("scheduler", "%q is none of %s", c.Scheduler, strings.Join(Schedulers, ", "))
	}
	if c.PaceHeadroom != 0 && !(c.PaceHeadroom >= 1 && c.PaceHeadroom <= 100) {
		bad("pace_headroom", "must be between 1 and 100 (0: default %v), got %v", gage.DefaultShapeHeadroom, c.PaceHeadroom)
	}
	if c.PaceMaxDelay < 0 {
		bad("pace_max_delay", "must be >= 0, got %v", time.Duration(c.PaceMaxDelay))
	}
	if c.PaceResponses && c.Unit != nil && c.Unit.Net <= 0 {
		bad("pace_responses", "needs a unit with network bytes (unit.net > 0): responses are paced to the reservations' network rate")
	}
	if c.Queue < 0 {
		bad("queue", "must be >= 0 (0: default 256), got %d", c.Queue)
	}
	if c.Unit != nil {
		if err := gage.Unit(c.Unit.Vector()).Validate(); err != nil {
			bad("unit", "%w", err)
		}
	}
	if c.Capacity != nil {
		if v := c.Capacity.Vector(); v[gage.CPU] < 0 || v[gage.Disk] < 0 || v[gage.Net] < 0 {
			bad("capacity", "must be >= 0")
		}
	}
	switch {
	case c.Capacity != nil && c.CapacityGRPS != 0:
		bad("capacity_grps", "set capacity_grps or capacity, not both")
	case c.Capacity == nil && (c.CapacityGRPS <= 0 || math.IsInf(c.CapacityGRPS, 0) || math.IsNaN(c.CapacityGRPS)):
		bad("capacity_grps", "must be > 0 GRPS (or set capacity per resource): until nodes report their capacity, the gateway paces to the configured one")
	}
	gc := c.Gage()
	if err := gc.Validate(); err != nil {
		errs = append(errs, err)
	} else if capacity := gc.UnitOrDefault().GRPS(c.CapacityVector()); capacity > 0 {
		// The configured capacity is the operator's figure, not an
		// estimate from a cluster still starting: reservations beyond it
		// cannot be kept, so the config is refused.
		if err := gage.Admit(gc, capacity); err != nil {
			var ob *gage.OverbookedError
			if errors.As(err, &ob) {
				bad("subscribers", "reservations total %.1f GRPS, over the capacity of %.1f GRPS; not covered: %s",
					ob.Reserved, ob.Capacity, strings.Join(ob.Over, ", "))
			}
		}
	}
	subs := map[string]bool{gage.DefaultName: true}
	for _, s := range c.Subscribers {
		subs[s.Name] = true
	}
	if len(c.Routes) == 0 {
		bad("routes", "at least one route is needed")
	}
	seen := map[string]string{}
	for i, r := range c.Routes {
		errs = append(errs, r.validate(fmt.Sprintf("routes[%d]", i), subs, seen)...)
	}
	errs = append(errs, c.validateBalance()...)
	return errors.Join(errs...)
}

// validateBalance checks each route's balance and that the routes of a
// service agree on it: the policy is the service's, not the route's.
func (c *Config) validateBalance() []error {
	var errs []error
	type named struct{ policy, route string }
	first := map[string]named{} // service: the first route naming a policy
	for i, r := range c.Routes {
		f := fmt.Sprintf("routes[%d].balance", i)
		if err := balance.CheckName(r.Balance); err != nil {
			errs = append(errs, &gage.FieldError{Field: f, Err: err})
			continue
		}
		if r.Balance == "" {
			continue
		}
		if prev, ok := first[r.Service]; ok && prev.policy != r.Balance {
			errs = append(errs, &gage.FieldError{Field: f, Err: fmt.Errorf("%q, but %s names %q for service %q: a service has one policy", r.Balance, prev.route, prev.policy, r.Service)})
			continue
		}
		first[r.Service] = named{r.Balance, f}
	}
	// A key is read for the affinity policy alone; under another it is
	// silently ignored, which is surely not what the file means.
	for i, r := range c.Routes {
		if p, ok := first[r.Service]; ok && p.policy != balance.NameAffinity && r.Affinity != (AffinitySpec{}) {
			errs = append(errs, &gage.FieldError{Field: fmt.Sprintf("routes[%d].affinity", i),
				Err: fmt.Errorf("service %q balances with %q (%s), which ignores affinity keys: use balance: affinity, or drop the key", r.Service, p.policy, p.route)})
		}
	}
	return errs
}

func (r Route) validate(f string, subs map[string]bool, seen map[string]string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &gage.FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	host, err := normalizeRouteHost(r.Host)
	if err != nil {
		bad(f+".host", "%w", err)
	}
	if r.PathPrefix != "" && (!strings.HasPrefix(r.PathPrefix, "/") || strings.ContainsAny(r.PathPrefix, "?# \t")) {
		bad(f+".path_prefix", "%q must start with / and hold no query, fragment or space", r.PathPrefix)
	}
	methods := r.Methods
	if len(methods) == 0 {
		methods = []string{"*"}
	}
	for j, m := range r.Methods {
		if !httpguts.ValidHeaderFieldName(m) || strings.ToUpper(m) != m {
			bad(fmt.Sprintf("%s.methods[%d]", f, j), "%q is not an HTTP method in capitals, like GET", m)
		}
	}
	if r.Service == "" {
		bad(f+".service", "is required")
	}
	if r.Method == "" {
		bad(f+".method", "is required")
	}
	for j, s := range r.Subscribers {
		if !subs[s] {
			bad(fmt.Sprintf("%s.subscribers[%d]", f, j), "%q is no subscriber's name", s)
		}
	}
	if r.Stream && r.Passthrough {
		bad(f+".stream", "a stream route carries messages, not whole HTTP requests: drop passthrough")
	}
	if r.Timeout < 0 {
		bad(f+".timeout", "must be >= 0, got %v", time.Duration(r.Timeout))
	}
	errs = append(errs, r.Partition.validate(f+".partition")...)
	errs = append(errs, r.Affinity.validate(f+".affinity")...)
	prefix := r.PathPrefix
	if prefix == "" {
		prefix = "/"
	}
	for _, m := range methods {
		k := host + " " + prefix + " " + m
		if prev, dup := seen[k]; dup {
			bad(f, "same host, path_prefix and method %s as %s", m, prev)
			continue
		}
		seen[k] = f
	}
	return errs
}

func (a AffinitySpec) validate(f string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &gage.FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	n := 0
	for _, set := range []bool{a.Segment != 0, a.Header != "", a.Query != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		bad(f, "set one of segment, header or query, not several")
	}
	if a.Segment < 0 {
		bad(f+".segment", "must be >= 1 (the first path segment is 1), got %d", a.Segment)
	}
	if a.Header != "" && !httpguts.ValidHeaderFieldName(a.Header) {
		bad(f+".header", "%q is not a header name", a.Header)
	}
	return errs
}

func (p PartitionSpec) validate(f string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &gage.FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	n := 0
	for _, set := range []bool{p.Segment != 0, p.Header != "", p.Query != "", p.Fixed != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		bad(f, "set one of segment, header, query or fixed, not several")
	}
	if p.Segment < 0 {
		bad(f+".segment", "must be >= 1 (the first path segment is 1), got %d", p.Segment)
	}
	if p.Header != "" && !httpguts.ValidHeaderFieldName(p.Header) {
		bad(f+".header", "%q is not a header name", p.Header)
	}
	if p.Fixed != nil && *p.Fixed < 0 {
		bad(f+".fixed", "must be >= 0, got %d", *p.Fixed)
	}
	if p.Count < 0 {
		bad(f+".count", "must be >= 0, got %d", p.Count)
	}
	if p.Hash {
		switch {
		case p.Fixed != nil || n == 0:
			bad(f+".hash", "hashes a key: name it with segment, header or query")
		case p.Count == 0:
			bad(f+".count", "is required with hash: the number of partitions the key is spread over")
		}
	}
	if p.Fixed != nil && p.Count > 0 && *p.Fixed >= p.Count {
		bad(f+".fixed", "%d is not below count %d", *p.Fixed, p.Count)
	}
	return errs
}

// normalizeRouteHost returns host lowercased without trailing dot, or why
// it is not a host name or *.suffix wildcard.
func normalizeRouteHost(h string) (string, error) {
	if h == "" {
		return "", nil
	}
	n := strings.TrimSuffix(strings.ToLower(h), ".")
	name := strings.TrimPrefix(n, "*.")
	if name == "" || strings.ContainsAny(name, "*/:[] \t?#@") || strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
		return "", fmt.Errorf("%q is not a host name or *.suffix wildcard", h)
	}
	return n, nil
}
