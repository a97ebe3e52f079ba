package aggregation

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Limits on what one AggregateRequest may ask of a node. A request comes
// from anyone allowed to call Aggregate (clients included) and says how
// long the node waits for its subtree and holds the call's work
// (deadline, grace) and how many participants it forwards to; without
// bounds one call could keep a node's goroutines, timers and ledger
// entries for hours, or make it fan out to an arbitrary number of
// children. A request over a limit is refused before anything runs or is
// forwarded, as InvalidArgument with a message naming the limit.
const (
	// DefaultMaxDeadline bounds deadline_ns and grace_ns (and every
	// participant's deadline): far above the DAC's sub-second deadlines
	// and a batch query's seconds.
	DefaultMaxDeadline = time.Minute
	// DefaultMaxParticipants bounds the participants of one request,
	// which bounds the fan-out of every node in its tree (Base's
	// coordinator has them all as children): a cluster's partitions of
	// one service.
	DefaultMaxParticipants = 4096
)

// limits are a node's bounds on aggregation requests.
type limits struct {
	maxDeadline     time.Duration
	maxParticipants int
}

// check refuses in if it asks for more than l allows.
func (l limits) check(in *pb.AggregateRequest) error {
	refuse := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "neptune: aggregate %s of service %q: "+format, append([]any{in.CallId, in.Service}, args...)...)
	}
	if n := len(in.Participants); n > l.maxParticipants {
		return refuse("%d participants, over this node's limit of %d (NodeConfig.MaxAggregateParticipants)", n, l.maxParticipants)
	}
	if in.ElapsedNs < 0 {
		return refuse("negative elapsed time %v", time.Duration(in.ElapsedNs))
	}
	for _, f := range []struct {
		name string
		ns   int64
	}{{"deadline", in.DeadlineNs}, {"grace", in.GraceNs}} {
		if d := time.Duration(f.ns); d < 0 || d > l.maxDeadline {
			return refuse("%s %v outside 0..%v, this node's limit (NodeConfig.MaxAggregateDeadline)", f.name, d, l.maxDeadline)
		}
	}
	for _, p := range in.Participants {
		if d := time.Duration(p.DeadlineNs); d < 0 || d > l.maxDeadline {
			return refuse("participant %d's deadline %v outside 0..%v, this node's limit (NodeConfig.MaxAggregateDeadline)", p.Index, d, l.maxDeadline)
		}
	}
	return nil
}
