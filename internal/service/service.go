// Package service is the definition of a Neptune service: what a team
// writes (a name, methods with a read/write mode and handlers, and
// optionally replication, service classes and aggregation operators) and
// what a handler sees (Request, Response). It holds no runtime: the node
// (internal/node) hosts services, the client (internal/client) calls them.
// The root package re-exports every type here under the same name, so
// users write neptune.Service{...}.
package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Mode says whether a method only reads a partition or also changes it.
// Replication (and the choice of replica) depends on it. The values are
// the wire's (transport/pb.Mode).
type Mode int8

const (
	// Read methods leave the partition unchanged; any replica may serve them.
	Read Mode = 1
	// Write methods change the partition.
	Write Mode = 2
)

func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Mode(%d)", int8(m))
}

// ParseMode parses "read" or "write" (case-insensitive).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "read", "r":
		return Read, nil
	case "write", "w":
		return Write, nil
	}
	return 0, fmt.Errorf("neptune: mode %q is neither read nor write", s)
}

// Request is one call as a handler sees it.
type Request struct {
	Service   string
	Partition int
	Method    string
	Mode      Mode
	// Class is the caller's service class ("" is the default class).
	Class string
	Body  []byte
	// LSN is the log sequence number replication assigned to a write of a
	// replicated service, 0 otherwise. A handler that stores it atomically
	// with its own update lets Check tell, after a crash, whether the write
	// was applied (see Service.Check).
	LSN uint64
}

// CheckFunc reports whether the write with lsn was applied to partition's
// data: replication calls it after a restart to reissue writes the log
// holds but the service may have lost, and never applies a write twice.
// The usual pattern for a SQL service keeps a table partition → last LSN,
// updated in the same transaction as each write, and answers lsn <= last.
type CheckFunc func(ctx context.Context, partition int, lsn uint64) (bool, error)

// Response is a handler's answer.
type Response struct {
	Body []byte
	// Version is the partition version (LSN) the response reflects; zero
	// for services without replication.
	Version uint64
	// Cost is the resource use the handler reports for this request; the
	// node charges it to the request's class when the service's Accounting
	// is Reported. Not sent to the caller.
	Cost time.Duration
	// Used is what the handler used outside its own thread (child
	// processes it ran, work it handed to other goroutines), which the
	// node adds to the usage it measures for Gage. Not sent as is.
	Used Usage
}

// Handler serves one method call. It runs on one of the service's workers;
// ctx carries the caller's deadline.
type Handler func(ctx context.Context, req *Request) (*Response, error)

// ErrStorage is what a write handler wraps when its storage failed (a
// full disk, an I/O error) before the write took effect: the write did not
// happen. Any other error a write handler returns is the write's result,
// recorded and given to every retry. A replicated partition whose handler
// returns it stops and runs the write again once its storage works
// (docs/architecture/replica.md, "Full disk"); never return it for a
// write that partly happened.
var ErrStorage = errors.New("neptune: service storage failed")

// ServerStream is a stream call as its handler sees it: the caller's
// messages and the way back. Recv and Send may be called from two
// goroutines at once, but neither from two.
type ServerStream interface {
	// Recv returns the caller's next message, or io.EOF once the caller
	// closed its side (at once for Client.Stream, whose one message is
	// Request.Body).
	Recv() ([]byte, error)
	// Send sends one message to the caller. It blocks while the caller
	// is not reading (gRPC's flow control), fails with ErrTooLarge for a
	// message over the node's MaxMessageBytes, and fails once the caller
	// is gone or the deadline passed.
	Send([]byte) error
}

// StreamHandler serves a stream method, read or write, in one shape.
//
// A Read stream method runs once per stream, on one worker of the
// replica the caller's balancer chose, for as long as the stream lasts:
// many rounds of Recv and Send with one instance (Client.OpenStream), or
// one request (Request.Body) answered by many Sends (Client.Stream).
//
// A Write stream method runs once per message: each message the caller
// sends is a write with its own identity (the stream's and its seq),
// and the handler runs for it with a stream whose Recv yields that one
// message and then io.EOF; what it Sends (at most once) is that
// message's answer. On a replicated service each message is logged and
// applied exactly once, on every replica, in the order sent; elsewhere
// it runs once, as a write Call would. Keep the stream's state in the
// partition, not in the handler's variables.
type StreamHandler func(ctx context.Context, req *Request, s ServerStream) error

// Method is one entry point of a service. Exactly one of Handler and Stream
// is set. The node announces each
// method's name, mode and kind, so callers name only the method.
type Method struct {
	Name    string
	Mode    Mode
	Handler Handler
	Stream  StreamHandler
}

// Service is what a team writes: a name and its methods. Workers and
// QueueLimit size the per-service pool on each node (defaults 16 and 1024).
// Aggregate, if set, declares the operators Client.Aggregate runs; a
// service may consist of them alone.
type Service struct {
	Name    string
	Methods []Method
	// Check, if set, is the CHECK callback of replicated services.
	Check CheckFunc
	// Snapshots, if set, lets a replicated partition's replicas catch up
	// or be repaired by a snapshot of its state (snapshot.go).
	Snapshots Snapshotter
	// Replication, if set, replicates the service's partitions
	// (replication.go); the node then needs NodeConfig.DataDir.
	Replication *Replication
	Aggregate   *Aggregator
	Workers     int
	QueueLimit  int
	// Classes are the service classes (classes.go); Request.Class names
	// one. With Classes, each node drops requests that can no longer earn
	// yield, keeps each class's Guarantee and otherwise orders them by
	// Policy; without, it serves them in arrival order.
	Classes []Class
	// DefaultClass receives requests with an empty or unknown class; empty
	// means the first of Classes.
	DefaultClass string
	// IdentityClasses serves the calls of a caller's certificate identity
	// ("client/partner", "gateway/edge": its role and name) in the class
	// it maps to, whatever class the call names: a class per client
	// (dissertation §4.2.2), which a caller cannot raise by asking. It
	// takes effect on a node running mutual TLS; a caller it does not
	// list keeps the class it names. Each class must be one of Classes.
	IdentityClasses map[string]string
	// Policy orders the classes once guarantees are met (default Adaptive).
	Policy SchedPolicy
	// OverloadWindow is how far back Adaptive counts dropped requests to
	// choose between YID and Greedy (default 30 s, the dissertation's); a
	// service whose deadlines are tens of milliseconds may want it
	// shorter, so the switch follows a load change sooner.
	OverloadWindow time.Duration
	// Accounting is how requests are charged against the guarantees
	// (default WallTime).
	Accounting Accounting
}

// Validate checks the service definition; the message names the field.
func (s *Service) Validate() error {
	if s.Name == "" {
		return fmt.Errorf("neptune: service Name is empty")
	}
	if len(s.Methods) == 0 && s.Aggregate == nil {
		return fmt.Errorf("neptune: service %q: Methods is empty and Aggregate is nil", s.Name)
	}
	if s.Aggregate != nil {
		if err := s.Aggregate.validate(); err != nil {
			return fmt.Errorf("neptune: service %q: Aggregate: %w", s.Name, err)
		}
	}
	seen := map[string]bool{}
	for i, m := range s.Methods {
		where := fmt.Sprintf("neptune: service %q: Methods[%d] (%q)", s.Name, i, m.Name)
		switch {
		case m.Name == "":
			return fmt.Errorf("%s: Name is empty", where)
		case seen[m.Name]:
			return fmt.Errorf("%s: Name is declared twice", where)
		case m.Mode != Read && m.Mode != Write:
			return fmt.Errorf("%s: Mode must be Read or Write", where)
		case (m.Handler == nil) == (m.Stream == nil):
			return fmt.Errorf("%s: set exactly one of Handler and Stream", where)
		}
		seen[m.Name] = true
	}
	if s.Replication != nil {
		if err := s.Replication.Validate(); err != nil {
			return fmt.Errorf("neptune: service %q: %w", s.Name, err)
		}
	}
	if s.Workers < 0 {
		return fmt.Errorf("neptune: service %q: Workers must be >= 0, got %d", s.Name, s.Workers)
	}
	if s.QueueLimit < 0 {
		return fmt.Errorf("neptune: service %q: QueueLimit must be >= 0, got %d", s.Name, s.QueueLimit)
	}
	return s.validateClasses()
}
