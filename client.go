package neptune

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/neptune-cluster/neptune/internal/aggregation"
	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/security"
)

// ClientConfig configures Dial: Join (gossip addresses of cluster nodes;
// required), Host and Advertise (where the client's gossip and poll
// socket bind and are reached), Balance (see Balancing) and
// ServiceBalance (a service's own Balancing, overriding Balance for calls
// to it, as Envoy's per-cluster lb_policy), AnnounceTTL,
// Registerer, Logger, TracerProvider, Security (required: material or
// Insecure), MaxMessageBytes (default 16 MiB) and Retry (see
// RetryPolicy). Zero fields take their defaults.
type ClientConfig = config.Client

// RetryPolicy is how a client retries calls that fail with a retryable
// error (see ClientConfig.Retry and WithRetry): by default for up to
// 10 s (Budget; negative: one try per Call), pauses from 50 ms (Backoff)
// doubling to 1 s (MaxBackoff) with jitter, within the call's deadline;
// FailFastOnOverload returns an overloaded refusal at once.
type RetryPolicy = config.RetryPolicy

// Dial joins a cluster as a client: it learns the yellow pages by gossip but
// hosts nothing.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if len(cfg.Join) == 0 {
		return nil, errors.New("neptune: ClientConfig.Join is empty: name at least one node's gossip address")
	}
	if err := config.ValidateBalance("ClientConfig", cfg.Balance, cfg.ServiceBalance); err != nil {
		return nil, err
	}
	if err := cfg.Retry.Validate("ClientConfig.Retry"); err != nil {
		return nil, fmt.Errorf("neptune: %w", err)
	}
	sc, err := security.FromConfig(cfg.Security, "ClientConfig.Security", pki.Identity{})
	if err != nil {
		return nil, err
	}
	sc.Logger = cfg.Logger
	sec, err := security.Load(sc)
	if err != nil {
		return nil, fmt.Errorf("neptune: ClientConfig.Security: %w", err)
	}
	if sec.Insecure() && cfg.Logger != nil {
		cfg.Logger.Warn("client running INSECURE: plaintext gRPC and gossip, unauthenticated polls")
	}
	c, err := client.New(ctx, client.Config{Client: cfg, Material: sec})
	if err != nil {
		return nil, err
	}
	return &Client{c: c}, nil
}

// Client calls services anywhere in the cluster. It is safe for concurrent
// use.
type Client struct {
	c *client.Client
}

// Session is the paper's NeptuneHandle: a caller's identity across calls.
// It records the newest partition version each call returned, which
// consistency level 3 uses for read-your-writes and monotonic reads. Pass
// it to calls with WithSession. A Session is safe for concurrent use.
type Session = client.Session

// NewSession returns an empty session.
func NewSession() *Session { return client.NewSession() }

// CallOption adjusts one call: WithSession, WithClass, WithTimeout,
// WithIdempotencyKey, WithRetryOf, WithRetry, WithAffinity.
type CallOption = client.Option

// WithSession makes the call part of sess: a read of a level-3 partition
// sees at least the versions sess has seen (read-your-writes, monotonic
// reads), and the call's answer raises them.
func WithSession(sess *Session) CallOption { return client.WithSession(sess) }

// WithClass sets the service class of the call ("" is the service's
// default class).
func WithClass(class string) CallOption { return client.WithClass(class) }

// WithAffinity gives the call an affinity key (a cache key, a user):
// under the "affinity" balancing policy calls with the same key go to the
// same replica of the partition, the same for every client, while that
// replica's load stays within Balancing.LoadBound of the others', so what
// the replica caches for the key is reused (docs/architecture/balance.md).
// Other policies ignore it, as does a call that must go to the primary.
func WithAffinity(key string) CallOption { return client.WithAffinity(key) }

// WithTimeout bounds the call, retries included, to d, on top of ctx's
// deadline.
func WithTimeout(d time.Duration) CallOption { return client.WithTimeout(d) }

// WithUsage asks the node that serves the call for what it used and
// stores it in u (Gage accounting; the node measures calls whose context
// names a subscriber, as the HTTP gateway's do).
func WithUsage(u *CallUsage) CallOption { return client.WithUsage(u) }

// WithIdempotencyKey gives a write the caller's own identity: every call
// with the same key on the same partition executes at most once, and each
// returns the first one's result (response or error), for as long as the
// partition remembers the key (10 minutes of the primary's time; see
// docs/architecture/replica.md). Without it a write carries the client's
// random id and a sequence number, which makes the library's own retries
// safe. Reads ignore it.
func WithIdempotencyKey(key string) CallOption { return client.WithIdempotencyKey(key) }

// WithRetryOf makes the call a retry of the write that failed with err
// (an UnknownOutcomeError of an identified write): the retry carries the
// same identity, so the write executes at most once in all and the retry
// returns the original result; and since the first call may have run,
// every error the retry returns is again such an UnknownOutcomeError.
// Any other err, nil included, changes nothing. The client's retry
// policy (ClientConfig.Retry) already retries this way within each Call;
// a loop of your own, for longer than its budget, passes its last error:
//
//	var err error
//	for {
//		resp, err = c.Call(ctx, svc, p, "append", body, neptune.WithRetryOf(err))
//		if err == nil || !neptune.Retryable(err) {
//			break
//		}
//	}
func WithRetryOf(err error) CallOption { return client.WithRetryOf(err) }

// WithRetry makes one call follow p instead of the client's retry policy
// (zero fields take the defaults; Budget -1 makes one try).
func WithRetry(p RetryPolicy) CallOption { return client.WithRetry(p) }

// Call runs method on partition of service somewhere in the cluster and
// returns its response. Whether the method reads or writes is what the
// service declares (its nodes announce their method tables); a service,
// partition or method nobody announces fails at once with
// ErrUnknownService, ErrUnknownPartition or ErrUnknownMethod, a stream
// method with ErrWrongMode. The call goes to the replica the balancing
// policy picks; if the connection fails, up to three replicas are tried
// and a failed node is excluded until it announces itself again. A write
// is re-sent after a failure that leaves its outcome open only because it
// carries an identity (the client's id and a sequence number, or
// WithIdempotencyKey): a replicated partition executes it at most once and
// answers the re-send with the first attempt's result.
func (c *Client) Call(ctx context.Context, service string, partition int, method string, body []byte, opts ...CallOption) (*Response, error) {
	return c.c.Call(ctx, service, partition, method, body, opts...)
}

// Stream calls a read-only stream method; read the chunks with Recv.
func (c *Client) Stream(ctx context.Context, service string, partition int, method string, body []byte, opts ...CallOption) (*Stream, error) {
	return c.c.Stream(ctx, service, partition, method, body, opts...)
}

// Stream is the answer of a stream method; Recv returns the next chunk,
// or io.EOF after the last one.
type Stream = client.Stream

// OpenStream opens a bidirectional stream with one replica of service's
// partition (chosen by the balancer; a write stream's: the primary)
// running method, a stream method: both sides send messages (Send,
// CloseSend; the handler's ServerStream) and receive them (Recv) until
// either ends it. gRPC's flow control holds a Send while the replica is
// not reading; a message over MaxMessageBytes is refused with
// ErrTooLarge and not sent. ctx (and WithTimeout) bound the stream;
// Close abandons it. A read stream runs the handler once for the whole
// stream, with one instance, at any replication level.
//
// On a Write stream method of a replicated service every message is a
// logged write with its own identity (the stream's id and the message's
// sequence number), applied exactly once, in the order sent, and
// answered (RecvFrame: with its seq and version) once applied. A stream
// is never moved to another replica: a failure ends it, for a write
// stream with a *StreamOutcomeError that says which messages were
// applied, which may have been and which never were; OpenStream with
// WithResume(err) continues it under the same identity.
func (c *Client) OpenStream(ctx context.Context, service string, partition int, method string, opts ...CallOption) (*BidiStream, error) {
	return c.c.OpenStream(ctx, service, partition, method, opts...)
}

// BidiStream is an open bidirectional stream (OpenStream). One goroutine
// may Send while another Recvs.
type BidiStream = client.BidiStream

// StreamFrame is one answer of a stream with, for a write stream, the
// seq of the message it answers and the version it was applied at.
type StreamFrame = client.Frame

// StreamOutcomeError ends a failed write stream: messages 1..Applied were
// applied exactly once, Applied+1..MaybeApplied may have been
// (errors.Is(err, ErrUnknownOutcome) holds then), the rest up to Sent
// never were.
type StreamOutcomeError = nerr.StreamOutcomeError

// WithResume makes OpenStream of a write stream continue the one that
// failed with err (a *StreamOutcomeError): the same identity, messages
// numbered from err's Applied+1. Resend from there: each message is
// applied at most once in all, one already applied answered with its
// first result. Any other err changes nothing.
func WithResume(err error) CallOption { return client.WithResume(err) }

// Pending is a Call in flight (Client.Go): Wait for it, select on Done,
// or Cancel it; any number may be in flight from one goroutine.
type Pending = client.Pending[*Response]

// PendingAggregate is an aggregation in flight (Client.GoAggregate).
type PendingAggregate = client.Pending[*AggregateResult]

// Go starts Call(ctx, service, partition, method, body, opts...) on its
// own goroutine and returns its handle at once. Cancel ends the call's
// context, with what that means for a write (see Call's errors).
func (c *Client) Go(ctx context.Context, service string, partition int, method string, body []byte, opts ...CallOption) *Pending {
	return c.c.Go(ctx, service, partition, method, body, opts...)
}

// GoAggregate starts Aggregate(ctx, a) and returns its handle at once;
// Wait returns what Aggregate would (a partial result with
// ErrBelowQuality included).
func (c *Client) GoAggregate(ctx context.Context, a Aggregation) *PendingAggregate {
	return c.c.GoAggregate(ctx, a, aggregation.Experiment{})
}

// Aggregate runs a Data Aggregation Call: every partition's Local operator
// on a replica the client picks by polled load, reduced along a tree of the
// chosen Scheme built from those loads, each node sending what it has by
// its staged deadline. A failed replica is replaced by another. If fewer
// than ⌈ρ·n⌉ partitions contribute, Aggregate returns ErrBelowQuality
// together with a result that reports what did arrive.
func (c *Client) Aggregate(ctx context.Context, a Aggregation) (*AggregateResult, error) {
	return c.c.Aggregate(ctx, a, aggregation.Experiment{})
}

// AggregateStream runs an aggregation like Aggregate whose partial
// results stream back as the tree reduces them: Next returns each one,
// covering more partitions than the last and saying its quality so far
// (Contributing, Missing, Coverage, QualityMet), the last with Final
// set, then io.EOF. The deadline and quality are Aggregate's: the final
// result comes by about T, and Result judges it against ρ as Aggregate
// would. Close stops early (say, once QualityMet): the rest of the
// tree's work is cancelled and Result reports the last partial result.
// Errors found before anything is sent (a bad Aggregation, an unknown
// service) return at once. Partial results come from the top of the
// tree, as its reductions finish: about log n of them on a LAT or
// binomial tree, one per partition with SchemeBase.
func (c *Client) AggregateStream(ctx context.Context, a Aggregation) (*AggregateStream, error) {
	return c.c.AggregateStream(ctx, a, aggregation.Experiment{})
}

// Members returns the yellow pages, polling each member's load for every
// partition it hosts (answers later than wait count as -1); wait <= 0
// lists them at once without polling (every load -1), for a caller that
// polls them itself with PollLoad.
func (c *Client) Members(ctx context.Context, wait time.Duration) []Member {
	return c.c.Members(ctx, wait)
}

// PollLoad polls one member's load for every partition it hosts into m's
// Load maps (as Members(ctx, 0) returns them); a poll not answered within
// wait, or before ctx ends, leaves its load as it was. Members polls
// members one after another; a status page polls them concurrently with
// this, each under its own deadline.
func (c *Client) PollLoad(ctx context.Context, m Member, wait time.Duration) {
	c.c.PollLoad(ctx, m, wait)
}

// Departed returns the members that left the yellow pages recently (for
// as long as a lost member may rejoin, a bounded number of them): their
// last announced addresses, services and replicas' status, when they
// were last seen and why they left. Members shows only the live ones, so
// a status page opened after a node died needs this to show that node.
func (c *Client) Departed() []DepartedMember { return c.c.Departed() }

// Partitions returns the replicated partitions in the yellow pages, sorted,
// each with its replicas' announced status (as of their last announcement).
func (c *Client) Partitions() []PartitionInfo { return c.c.Partitions() }

// Promote asks node's replica of service's partition to become its
// primary by an election that needs a majority of the partition's
// replicas, and returns the replica's status after (within a bound of
// about lease + 2 election timeouts + ack timeout): check its Role, the
// election may be lost. No acknowledged write is lost. An operator's
// certificate is needed.
func (c *Client) Promote(ctx context.Context, node, service string, partition int) (ReplicaInfo, error) {
	return c.c.Promote(ctx, node, service, partition, false)
}

// ForcePromote makes node's replica of service's partition the primary at
// once, without votes: the operator's recovery when fewer than a majority
// of the partition's replicas survive (promote the one with the newest
// version; the others recover from it). Acknowledged writes the promoted
// replica lacks are lost: versions above its Last up to the highest
// commit point any replica reached. A replica whose log then differs
// below its commit point reports Diverged and serves nothing; there is no
// automatic repair yet: the operator rebuilds it (a fresh data directory).
func (c *Client) ForcePromote(ctx context.Context, node, service string, partition int) (ReplicaInfo, error) {
	return c.c.Promote(ctx, node, service, partition, true)
}

// ChangeReplicas asks node, the primary of service's partition, to add
// the replica add (joining as a learner with priority, promoted to voter
// once it caught up) or to remove the replica remove (the primary itself
// hands its role over first), and waits until ctx ends for the change to
// commit; ReplicaSet.Done tells whether it did. The partition serves
// throughout. An error wrapping ErrNoPrimary means node is not the
// primary (nothing changed); another error after the call was sent means
// the change may have happened: look at the replica set (Partitions) or
// ask again, which is safe. An operator's certificate is needed.
func (c *Client) ChangeReplicas(ctx context.Context, node, service string, partition int, add string, priority int, remove string) (ReplicaSet, error) {
	return c.c.ChangeReplicas(ctx, node, service, partition, add, priority, remove)
}

// SetReplicaPriority asks node, the primary of service's partition, to
// give the member replica the priority priority, through the
// partition's log, and waits like ChangeReplicas. The highest-priority
// live, caught-up replica is the preferred primary: the primary hands
// its role to it, so this moves the primary role for good (Promote only
// moves it until priorities hand it back). Errors as ChangeReplicas.
func (c *Client) SetReplicaPriority(ctx context.Context, node, service string, partition int, replica string, priority int) (ReplicaSet, error) {
	return c.c.SetReplicaPriority(ctx, node, service, partition, replica, priority)
}

// Drain asks node to drain, as SIGTERM does (an operator's certificate is
// needed): it answers once the node's primary roles are handed over,
// with the partitions it kept because no in-sync replica could take them;
// the node then finishes its calls in flight and stops.
func (c *Client) Drain(ctx context.Context, node string) ([]string, error) {
	return c.c.Drain(ctx, node)
}

// Backup streams a consistent snapshot of service's partition from
// node, its primary, to w: the exactly-once table, then the service's
// image, as of BackupInfo.LSN (`neptune backup` writes them into a backup
// file). An operator's certificate is needed. An error wrapping
// ErrNoPrimary means node is not the primary (nothing was written).
func (c *Client) Backup(ctx context.Context, node, service string, partition int, w io.Writer) (BackupInfo, error) {
	return c.c.Backup(ctx, node, service, partition, w)
}

// Debug streams one item of node's debug bundle to w (`neptune debug
// zip`; an operator's certificate is needed): "status", "config" (secrets
// left out), "metrics", "logs" (its recent log lines), "goroutine",
// "heap", "cpu" (a profile of seconds) or "dashboard/<view>" (a dashboard
// view's JSON).
func (c *Client) Debug(ctx context.Context, node, item string, seconds int, w io.Writer) error {
	return c.c.Debug(ctx, node, item, seconds, w)
}

// Close leaves the cluster and closes connections.
func (c *Client) Close() error { return c.c.Close() }

// What Members, Departed and Partitions report.
type (
	// ReplicaSet is a partition's replica set after a change
	// (ChangeReplicas).
	ReplicaSet = client.ReplicaSet
	// ReplicaMember is one replica of a ReplicaSet.
	ReplicaMember = client.ReplicaMember
	// BackupInfo says what a partition's backup holds (Backup).
	BackupInfo = client.BackupInfo
	// Member is one node in the yellow pages.
	Member = client.Member
	// HostedService is a service a member hosts, with polled loads.
	HostedService = client.HostedService
	// PartitionInfo is a replicated partition: its level and replicas.
	PartitionInfo = client.PartitionInfo
	// ReplicaInfo is one replica of a partition as the yellow pages show it.
	ReplicaInfo = client.ReplicaInfo
	// DepartedMember is a member that left the yellow pages recently.
	DepartedMember = client.Departed
)
