package config

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/placement"
)

// The configs below are the public API's (neptune.NodeConfig,
// neptune.ClientConfig, neptune.Security, neptune.RetryPolicy,
// neptune.Storage alias them), defined once: the node and client runtimes
// embed them and add only what a program cannot set (a clock, the loaded
// security material). Zero fields take the documented defaults.

// Node configures a node (neptune.NodeConfig).
type Node struct {
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
	// Balance selects the load-balancing policy of the node's own client,
	// and ServiceBalance overrides it per service (see Client).
	Balance        balance.Config
	ServiceBalance map[string]balance.Config
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
	// Placement tunes automatic replica placement (see placement.Config,
	// neptune.Placement).
	Placement placement.Config
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

// Client configures a client (neptune.ClientConfig, neptune.Dial).
type Client struct {
	// Join lists gossip addresses ("host:port") of cluster nodes. Required.
	Join []string
	// Host is the local address the client's gossip listener and poll
	// socket bind to. Default 127.0.0.1 when every Join address is on
	// loopback, else every interface, so the nodes can reach the client
	// and tell it of a failover at once.
	Host string
	// Advertise is the address the nodes reach the client's gossip at
	// (default: Host if it names one address, else the local address on
	// the route to the first Join address). A client advertised on
	// loopback to a cluster that is not logs a warning.
	Advertise string
	// Balance selects the load-balancing policy; the default is prequal
	// (see balance.Config, neptune.Balancing).
	Balance balance.Config
	// ServiceBalance overrides Balance for the services it names, as
	// Envoy sets lb_policy per cluster: calls to such a service use a
	// policy instance of its own, with its own state, and other services
	// use Balance. An entry's zero fields take the defaults, not
	// Balance's. {"pcache": {Policy: "affinity"}} keeps each cache key on
	// one replica while the other services go on polling.
	ServiceBalance map[string]balance.Config
	// AnnounceTTL is how long yellow-page entries live without refresh.
	AnnounceTTL time.Duration
	// Registerer receives the client's metrics; nil creates a private
	// registry. Two clients cannot share one as it is (see
	// Node.Registerer).
	Registerer prometheus.Registerer
	// Logger receives the client's logs; a call's lines carry its request
	// id (request_id).
	Logger *slog.Logger
	// TracerProvider receives the spans of the client's calls (the call,
	// with its service, partition, method, polls, chosen replicas and
	// attempts, and each RPC), whose W3C trace context goes to the nodes;
	// nil turns tracing off, at no cost.
	TracerProvider trace.TracerProvider
	// Security is the client's certificate (Dir and Cert: a client
	// certificate to call, an operator's to also Promote) and gossip
	// keyring, or an explicit Insecure; the zero value is refused.
	Security Security
	// MaxMessageBytes bounds a request body, refused before it is sent
	// with ErrTooLarge (so the write never ran), and a response (default
	// 16 MiB).
	MaxMessageBytes int
	// Retry is how Call tries again after a retryable error, keeping a
	// write's identity so it runs at most once: by default for up to 10 s,
	// pauses from 50 ms doubling to 1 s with jitter, within the call's
	// deadline. RetryPolicy{Budget: -1} makes one try per Call.
	Retry RetryPolicy
}

// Security says how a node or client proves who it is and whom it trusts
// (neptune.Security). Its zero value is refused: a member either names
// its material (Dir) or says Insecure, so running without protection is
// always a decision.
//
// With material, every gRPC connection is mutual TLS with certificates of
// the cluster CA (a node's names its node id; callers are authorised by
// the role their certificate names: clients call, nodes replicate,
// operators promote), gossip is encrypted and authenticated with the
// keyring and carries the cluster label, announcements are signed by the
// node they describe, and load polls carry an HMAC. Certificates and the
// keyring file are re-read when they change. Create the material with
// `neptune tls ca create`, `neptune tls cert create` and `neptune keyring
// generate`. internal/security turns it into what it loads
// (security.FromConfig).
type Security struct {
	// Insecure turns every protection off: plaintext gRPC anyone may call,
	// gossip anyone may join and poison, unauthenticated polls. Only for
	// experiments on a trusted machine; a node logs a warning.
	Insecure bool
	// Dir holds ca.pem and the member's certificate and key
	// (node-<id>.pem and node-<id>-key.pem for a node, <role>-<name>.pem
	// for a client). Required unless Insecure.
	Dir string
	// Cert names the certificate a client presents, as role/name:
	// "client/web" (calls) or "operator/alice" (calls and promote). A
	// node always presents node/<ID>; leave it empty or set exactly that.
	// Required for a secured client.
	Cert string
	// KeyringFile is the gossip keyring (`neptune keyring`); default
	// Dir/keyring.json. It is watched: install, use and remove take effect
	// without a restart.
	KeyringFile string
	// Cluster is the gossip label, so two clusters on one network never
	// merge; default the cluster name the CA records. For a node it is
	// the same name as Node.Cluster (set either; if both, equal), and a
	// CA recording another name is refused.
	Cluster string
}

// RetryPolicy is how Call tries again after a call fails with an error
// that nerr.Retryable accepts (no live replica, no primary, overloaded, a
// stopping node, a write of unknown outcome that carries an identity;
// not a deadline the node reports, which a second try would meet too), so
// that a caller writes no retry loop (neptune.RetryPolicy). Every retry
// of a write carries the first attempt's identity: the write runs at
// most once in all, and the answer is the original result.
//
// Pauses grow from Backoff, doubling up to MaxBackoff, each drawn at
// random from its upper half (jitter, so clients cut off together do not
// come back in step). The call's context and WithTimeout bound the whole,
// as does Budget.
type RetryPolicy struct {
	// Budget bounds the time one Call spends, its retries included; no
	// retry starts after it. Zero takes the default (10 s); negative
	// turns retries off (each Call makes one try, the library's own
	// failover within it aside).
	Budget time.Duration
	// Backoff is the first pause (default 50 ms) and MaxBackoff the
	// longest (default 1 s).
	Backoff, MaxBackoff time.Duration
	// FailFastOnOverload returns an overloaded refusal at once instead of
	// retrying it: a proxy (the HTTP gateway) passes back-pressure on to
	// its own callers rather than holding their requests until the
	// deadline.
	FailFastOnOverload bool
}

// DefaultRetryPolicy is the policy of a client whose config names none.
var DefaultRetryPolicy = RetryPolicy{Budget: 10 * time.Second, Backoff: 50 * time.Millisecond, MaxBackoff: time.Second}

// NoRetry makes one try per Call.
var NoRetry = RetryPolicy{Budget: -1}

// WithDefaults fills zero fields from DefaultRetryPolicy; a negative
// Budget stays (retries off).
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Budget == 0 {
		p.Budget = DefaultRetryPolicy.Budget
	}
	if p.Backoff <= 0 {
		p.Backoff = DefaultRetryPolicy.Backoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = max(DefaultRetryPolicy.MaxBackoff, p.Backoff)
	}
	return p
}

// Validate names the field that is wrong.
func (p RetryPolicy) Validate(field string) error {
	if p.Backoff < 0 || p.MaxBackoff < 0 {
		return fmt.Errorf("%s: Backoff and MaxBackoff must not be negative (got %v, %v)", field, p.Backoff, p.MaxBackoff)
	}
	if p.MaxBackoff > 0 && p.Backoff > p.MaxBackoff {
		return fmt.Errorf("%s: Backoff %v is above MaxBackoff %v", field, p.Backoff, p.MaxBackoff)
	}
	return nil
}

// Validate reports the first invalid field by its NodeConfig name.
func (c Node) Validate() error {
	if err := ValidateBalance("NodeConfig", c.Balance, c.ServiceBalance); err != nil {
		return err
	}
	if err := c.Security.Check("NodeConfig.Security"); err != nil {
		return err
	}
	if c.Security.Cert != "" && c.Security.Cert != "node/"+c.ID {
		return fmt.Errorf("neptune: NodeConfig.Security.Cert %q: a node presents its own certificate, node/%s", c.Security.Cert, c.ID)
	}
	if c.ID == "" {
		return errors.New("neptune: NodeConfig.ID is required")
	}
	for _, p := range []struct {
		name string
		port int
	}{{"GossipPort", c.GossipPort}, {"RPCPort", c.RPCPort}, {"PollPort", c.PollPort}} {
		if p.port < 0 || p.port > 65535 {
			return fmt.Errorf("neptune: NodeConfig.%s must be in 0..65535, got %d", p.name, p.port)
		}
	}
	if c.MaxMessageBytes < 0 || c.MaxMessageBytes > nerr.MaxMessageBytes {
		return fmt.Errorf("neptune: NodeConfig.MaxMessageBytes must be in 0..%d, got %d", nerr.MaxMessageBytes, c.MaxMessageBytes)
	}
	if msg := cmp.Or(c.MaxMessageBytes, nerr.DefaultMaxMessageBytes); c.MaxInflightBytes != 0 && c.MaxInflightBytes < int64(msg) {
		return fmt.Errorf("neptune: NodeConfig.MaxInflightBytes must be 0 (the default, %d) or at least NodeConfig.MaxMessageBytes (%d), got %d",
			nerr.DefaultMaxInflightBytes, msg, c.MaxInflightBytes)
	}
	if c.MaxAggregateDeadline < 0 || c.MaxAggregateParticipants < 0 {
		return fmt.Errorf("neptune: NodeConfig.MaxAggregateDeadline (%v) and MaxAggregateParticipants (%d) must be >= 0 (0: the default)", c.MaxAggregateDeadline, c.MaxAggregateParticipants)
	}
	if err := c.Placement.Validate(); err != nil {
		return fmt.Errorf("neptune: NodeConfig.Placement: %w", err)
	}
	if c.AnnounceInterval < 0 {
		return fmt.Errorf("neptune: NodeConfig.AnnounceInterval must be > 0, got %v", c.AnnounceInterval)
	}
	if c.AnnounceTTL != 0 && c.AnnounceTTL <= c.AnnounceInterval {
		return fmt.Errorf("neptune: NodeConfig.AnnounceTTL (%v) must exceed AnnounceInterval (%v)", c.AnnounceTTL, c.AnnounceInterval)
	}
	if c.Cluster != "" && c.Security.Cluster != "" && c.Cluster != c.Security.Cluster {
		return fmt.Errorf("neptune: NodeConfig.Cluster %q and NodeConfig.Security.Cluster %q disagree: a node has one cluster name; set one of them", c.Cluster, c.Security.Cluster)
	}
	return nil
}

// ValidateBalance reports the first invalid balancing of a client, its
// own (owner.Balance) or a service's (owner.ServiceBalance["name"]),
// naming it; owner is the config's public name, as "ClientConfig".
func ValidateBalance(owner string, def balance.Config, services map[string]balance.Config) error {
	if err := def.Validate(); err != nil {
		return fmt.Errorf("neptune: %s.Balance: %w", owner, err)
	}
	for _, name := range slices.Sorted(maps.Keys(services)) {
		if name == "" {
			return fmt.Errorf("neptune: %s.ServiceBalance: an entry names no service", owner)
		}
		if err := services[name].Validate(); err != nil {
			return fmt.Errorf("neptune: %s.ServiceBalance[%q]: %w", owner, name, err)
		}
	}
	return nil
}

// Check refuses a Security that names no material and is not Insecure,
// or is Insecure with material; field names s in errors. The certificate
// name is checked where it is loaded (security.FromConfig).
func (s Security) Check(field string) error {
	if s.Insecure {
		if s.Dir != "" || s.Cert != "" || s.KeyringFile != "" {
			return fmt.Errorf("neptune: %s.Insecure is set together with material (Dir, Cert or KeyringFile): choose one", field)
		}
		return nil
	}
	if s.Dir == "" {
		return fmt.Errorf("neptune: %s.Dir is required: the directory with ca.pem and this member's certificate (neptune tls ...), or set %s.Insecure to run without protection", field, field)
	}
	return nil
}
