// Package neptune turns a service that runs on one machine into a
// partitioned, replicated, load-balanced cluster service.
//
// A service is a set of named methods, each declared Read or Write, that
// handle opaque byte payloads. Nodes (NewNode) host partitions of services
// and find each other by gossip; clients (Dial, or Node.Client) call a method
// of a service partition without knowing which node serves it: the client
// looks the partition up in its yellow pages, polls a few replicas for their
// queue length and sends the call to the least loaded one.
//
// This package is the public API only. The types a service is written
// against are defined in internal/service and re-exported here under the
// same names; the runtimes live in internal/node, internal/client,
// internal/replication and internal/aggregation.
package neptune

import (
	"time"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/service"
)

// The service definition (internal/service).
type (
	// Mode says whether a method only reads a partition or also changes
	// it. Replication (and the choice of replica) depends on it.
	Mode = service.Mode
	// Request is one call as a handler sees it.
	Request = service.Request
	// Response is a handler's answer.
	Response = service.Response
	// Usage is what one request used of a node (Gage accounting); a
	// handler reports what it used outside its thread in Response.Used.
	Usage = service.Usage
	// NodeLoad is a node's figures over its last accounting cycle.
	NodeLoad = service.NodeLoad
	// CallUsage is what WithUsage returns about a call.
	CallUsage = service.CallUsage
	// Handler serves one method call on one of the service's workers.
	Handler = service.Handler
	// StreamHandler serves a stream method, read or write, in one shape
	// (Client.OpenStream, Client.Stream): a read stream runs once per
	// stream with one replica; a write stream runs once per message, each
	// a logged write applied exactly once.
	StreamHandler = service.StreamHandler
	// ServerStream is a stream call as its handler sees it: Recv the
	// caller's messages, Send answers.
	ServerStream = service.ServerStream
	// CheckFunc is the CHECK callback of replicated services: whether the
	// write with an LSN was applied to a partition's data.
	CheckFunc = service.CheckFunc
	// Snapshotter is the snapshot callback pair of a replicated service
	// (Service.Snapshots): a replica that cannot catch up from the log,
	// or whose log diverged, gets the primary's state from it.
	Snapshotter = service.Snapshotter
	// Method is one entry point of a service.
	Method = service.Method
	// Service is what a team writes: a name and its methods, and
	// optionally replication, classes and aggregation operators.
	Service = service.Service
)

const (
	// Read methods leave the partition unchanged; any replica may serve them.
	Read = service.Read
	// Write methods change the partition.
	Write = service.Write
)

// ParseMode parses "read" or "write" (case-insensitive).
func ParseMode(s string) (Mode, error) { return service.ParseMode(s) }

// Replication (internal/service/replication.go).
type (
	// Replication declares how a service's partitions are replicated
	// (dissertation ch. 5): consistency level, replicas and timing.
	// A primary serves and acknowledges only while it holds a lease
	// granted by a majority of its replicas (Replication.Lease). With
	// Replication.Linearizable (levels 2 and 3, beyond the papers) reads
	// and writes are linearizable: clients send every read to the primary,
	// which runs it under its lease once it has executed everything
	// committed when the read arrived; a read it cannot serve so fails
	// with a Retryable error, never executed.
	Replication = service.Replication
	// ReplicaSpec is one replica of a partition: its node and priority.
	ReplicaSpec = service.ReplicaSpec
)

// Place is the deterministic chained-declustering placement: partition's
// degree replicas on consecutive nodes, priorities degree..1.
func Place(partition int, nodes []string, degree int) []ReplicaSpec {
	return service.Place(partition, nodes, degree)
}

// Service classes (internal/service/classes.go).
type (
	// Yield is what answering a request is worth by its response time.
	Yield = service.Yield
	// Class is a service class: a yield function and a guaranteed share.
	Class = service.Class
	// SchedPolicy orders the classes once every guarantee is met.
	SchedPolicy = service.SchedPolicy
	// Accounting says how requests are charged against the guarantees.
	Accounting = service.Accounting
)

// Scheduling policies (dissertation Table 4.1).
const (
	Adaptive = service.Adaptive
	EDF      = service.EDF
	YID      = service.YID
	Greedy   = service.Greedy
)

// Accountings.
const (
	WallTime  = service.WallTime
	ThreadCPU = service.ThreadCPU
	Reported  = service.Reported
)

// ThroughputYield is worth c when answered within d and nothing after.
func ThroughputYield(c float64, d time.Duration) Yield { return service.ThroughputYield(c, d) }

// ResponseTimeYield decays linearly from c at once to nothing at d.
func ResponseTimeYield(c float64, d time.Duration) Yield { return service.ResponseTimeYield(c, d) }

// HybridYield is worth c up to dPre, then decays linearly to the drop
// penalty cDrop at d, and is worthless after d.
func HybridYield(c float64, dPre time.Duration, cDrop float64, d time.Duration) Yield {
	return service.HybridYield(c, dPre, cDrop, d)
}

// ParseSchedPolicy parses "adaptive", "edf", "yid" or "greedy".
func ParseSchedPolicy(s string) (SchedPolicy, error) { return service.ParseSchedPolicy(s) }

// ParseAccounting parses "wall", "cpu" or "reported".
func ParseAccounting(s string) (Accounting, error) { return service.ParseAccounting(s) }

// Aggregation operators (internal/service/aggregate.go).
type (
	// LocalFunc computes one partition's contribution to an aggregation.
	LocalFunc = service.LocalFunc
	// ReduceFunc combines two partial results (commutative, associative).
	ReduceFunc = service.ReduceFunc
	// Aggregator is a service's named aggregation operators.
	Aggregator = service.Aggregator
)

// Errors a call can return. Test with errors.Is; Retryable says whether
// trying again can help, and is safe.
//
// For a write, each error says whether it may have run:
//
//   - ErrUnknownService, ErrUnknownPartition, ErrUnknownMethod,
//     ErrWrongMode: never executed (refused before sending); a retry
//     fails the same way.
//   - ErrNoReplica, ErrNoPrimary: never executed (no replica reachable, or
//     the partition had no primary and did not log it); retrying later is
//     safe. Retryable.
//   - ErrOverloaded: never executed (refused at admission); retrying later
//     is safe. Retryable.
//   - ErrTooLarge: never executed (refused before it was sent or logged);
//     a retry fails the same way.
//   - ErrUnknownOutcome (an *UnknownOutcomeError): may or may not have
//     executed: the connection broke after the write was sent, the node's
//     forward to the primary failed, or the deadline passed while it was
//     in flight. Retryable only if the write carried an identity (every
//     write does by default; see WithIdempotencyKey): pass
//     WithRetryOf(err) (or the same idempotency key) and the write
//     executes at most once in all, the retry answering with the original
//     result. Without an identity a retry may execute it twice.
//   - ErrDeadline: a read's deadline; a write's deadline surfaces as
//     ErrUnknownOutcome if the write had been sent, else as itself (never
//     executed).
//   - ErrClosed: the node is shutting down and refused the call (it never
//     ran; retryable: another replica, or the node once restarted, takes
//     it); a write pending at a node that stops surfaces as
//     ErrUnknownOutcome.
//   - any other error is the handler's own: the write executed (or, with
//     an identity, a retry is answered with that same error).
var (
	ErrUnknownService   = nerr.ErrUnknownService
	ErrUnknownPartition = nerr.ErrUnknownPartition
	ErrUnknownMethod    = nerr.ErrUnknownMethod
	ErrWrongMode        = nerr.ErrWrongMode
	ErrNoReplica        = nerr.ErrNoReplica
	ErrNoPrimary        = nerr.ErrNoPrimary
	ErrDeadline         = nerr.ErrDeadline
	ErrOverloaded       = nerr.ErrOverloaded
	ErrClosed           = nerr.ErrClosed
	ErrUnknownOutcome   = nerr.ErrUnknownOutcome
	// ErrTooLarge: a body over the MaxMessageBytes limit. A request
	// refused with it was never sent or never ran; not retryable.
	ErrTooLarge = nerr.ErrTooLarge
	// ErrNotMember: the cluster's nodes and this member trust different
	// CAs (it was given another cluster's material), so it reaches none
	// of them; the error names both CAs where they are known. Never
	// executed; not retryable.
	ErrNotMember = nerr.ErrNotMember
	// ErrBadRequest and ErrNotFound are for handlers to wrap (fmt.Errorf
	// with %w): the request was malformed, or names what does not exist.
	// The error remains the handler's own (the call ran); its kind reaches
	// the caller, for errors.Is, and the HTTP gateway answers 400 and 404
	// with the message instead of 502.
	ErrBadRequest = nerr.ErrBadRequest
	ErrNotFound   = nerr.ErrNotFound
	// ErrStorage is for write handlers, not callers: wrap it when the
	// service's storage failed before the write took effect (see
	// service.ErrStorage).
	ErrStorage = service.ErrStorage
)

// UnknownOutcomeError is a write that may or may not have executed; it
// says whether the write carried an identity (Identified), which makes a
// retry with WithRetryOf safe, and which identity it carried (WriteID).
type UnknownOutcomeError = nerr.UnknownOutcomeError

// WriteID is a write's identity, the key of exactly-once execution: the
// client's id and the write's sequence number, or the caller's own key
// (WithIdempotencyKey). A retry that carries it (WithRetryOf) executes at
// most once in all.
type WriteID = nerr.WriteID

// Retryable reports whether the same call may succeed if tried again, and
// trying again is safe: overload, a missing replica or primary, a node
// shutting down, a read's deadline, or a write of unknown outcome that carried an identity (retry
// it with WithRetryOf(err)).
func Retryable(err error) bool { return nerr.Retryable(err) }
