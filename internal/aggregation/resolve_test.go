package aggregation

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// pages is a fixed yellow pages: partition → the nodes announced for it.
type pages map[int32][]membership.Replica

func (p pages) Replicas(_ string, part int32) membership.Lookup {
	return membership.Lookup{Replicas: p[part], ServiceKnown: true, PartitionKnown: p[part] != nil}
}
func (pages) Exclude(string) {}

// recorder is a Dialer that records every node and address dialed and
// answers each Aggregate with partition 1's result.
type recorder struct {
	mu     sync.Mutex
	dialed []string
}

func (r *recorder) ClientFor(node, addr string) (pb.NodeClient, error) {
	r.mu.Lock()
	r.dialed = append(r.dialed, node+"@"+addr)
	r.mu.Unlock()
	return answering{}, nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.dialed)
}

type answering struct{ pb.NodeClient }

func (answering) Aggregate(context.Context, *pb.AggregateRequest, ...grpc.CallOption) (*pb.AggregateResponse, error) {
	return &pb.AggregateResponse{Partitions: []int32{1}, Data: []byte("b")}, nil
}

var yellow = pages{
	0: {{Node: "n1", RPCAddr: "rpc-n1"}},
	1: {{Node: "n2", RPCAddr: "rpc-n2"}, {Node: "n3", RPCAddr: "rpc-n3"}},
}

func ra(node, addr string) *pb.ReplicaAddr { return &pb.ReplicaAddr{Node: node, RpcAddr: addr} }

// A child's replicas come from the yellow pages by node id: the
// addresses an AggregateRequest carries are never dialed, a node id not
// announced for the child's partition is left out, and a child with none
// left fails with ErrNoReplica naming them, before anything is dialed.
func TestChildReplicasResolvedFromTheYellowPages(t *testing.T) {
	d := &recorder{}
	c := NewCaller(Config{Directory: yellow, Dialer: d})
	target := &pb.Participant{Index: 1, Partition: 1, Parent: 0, DeadlineNs: int64(time.Second), Replicas: []*pb.ReplicaAddr{
		ra("evil", "10.6.6.6:1"), ra("n1", "10.6.6.6:2"), ra("n3", "10.6.6.6:3"), ra("n2", ""), ra("n3", "rpc-n3"),
	}}
	got, err := c.resolve("svc", target, []*pb.Participant{target})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, r := range got {
		s = append(s, r.Node+"@"+r.RpcAddr)
	}
	if want := []string{"n3@rpc-n3", "n2@rpc-n2"}; !slices.Equal(s, want) {
		t.Fatalf("resolved %v, want %v (evil is no member, n1 does not host partition 1, n3 once, at announced addresses)", s, want)
	}
	base := &pb.AggregateRequest{Service: "svc", GraceNs: int64(time.Millisecond)}
	if _, err := c.child(context.Background(), time.Now(), base, target, []*pb.Participant{target}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if dialed := d.got(); !slices.Equal(dialed, []string{"n3@rpc-n3"}) {
		t.Fatalf("dialed %v, want only n3 at its announced address", dialed)
	}

	forged := &pb.Participant{Index: 2, Partition: 1, DeadlineNs: int64(time.Second), Replicas: []*pb.ReplicaAddr{ra("evil", "10.6.6.6:1"), ra("n1", "rpc-n1")}}
	_, err = c.child(context.Background(), time.Now(), base, forged, []*pb.Participant{forged}, time.Millisecond)
	if !errors.Is(err, nerr.ErrNoReplica) || !strings.Contains(err.Error(), "evil, n1") {
		t.Fatalf("a child naming only nodes not announced for it: %v, want ErrNoReplica naming evil, n1", err)
	}
	if dialed := d.got(); len(dialed) != 1 {
		t.Fatalf("dialed %v for a child with no announced replica", dialed)
	}

	// Base's coordinator (index -1) may be any node hosting a partition
	// of its subtree.
	coord := &pb.Participant{Index: -1, Parent: -1, Replicas: []*pb.ReplicaAddr{ra("evil", "x"), ra("n1", "y"), ra("n2", "z")}}
	got, err = c.resolve("svc", coord, []*pb.Participant{{Index: 0, Partition: 0}, {Index: 1, Partition: 1}})
	if err != nil || len(got) != 2 || got[0].RpcAddr != "rpc-n1" || got[1].RpcAddr != "rpc-n2" {
		t.Fatalf("coordinator resolved to %v, %v; want n1 and n2 at their announced addresses", got, err)
	}
}

// directWorkers runs operators at once on the caller's goroutine.
type directWorkers struct{}

func (directWorkers) Do(ctx context.Context, _ string, run func(context.Context)) error {
	run(ctx)
	return nil
}

type hosting struct{ h Hosted }

func (s hosting) Aggregation(string) (Hosted, bool) { return s.h, true }

// Through a node's side: an AggregateRequest (from any caller allowed to
// call Aggregate) that gives node n2 an attacker's address and names a
// child on a node that is no member makes the node dial n2 at its
// announced address only; the forged child contributes nothing and the
// call still answers with what the members computed.
func TestServerDialsOnlyAnnouncedChildren(t *testing.T) {
	d := &recorder{}
	agg := &service.Aggregator{
		Local:  map[string]service.LocalFunc{"l": func(context.Context, int, []byte) ([]byte, error) { return []byte("a"), nil }},
		Reduce: map[string]service.ReduceFunc{"r": func(_ context.Context, a, b, _ []byte) ([]byte, error) { return append(slices.Clone(a), b...), nil }},
	}
	srv := NewServer(ServerConfig{
		Self:     "n1",
		Services: hosting{Hosted{Operators: agg, Partitions: []int32{0}, Workers: directWorkers{}, Ledger: &dac.Ledger{}}},
		Caller:   NewCaller(Config{Directory: yellow, Dialer: d}),
	})
	sec := int64(time.Second)
	in := &pb.AggregateRequest{
		CallId: "t", Service: "svc", Local: "l", Reduce: "r", Self: 0, DeadlineNs: sec, GraceNs: int64(10 * time.Millisecond),
		Participants: []*pb.Participant{
			{Index: 0, Partition: 0, Parent: -1, DeadlineNs: sec, Replicas: []*pb.ReplicaAddr{ra("n1", "rpc-n1")}},
			{Index: 1, Partition: 1, Parent: 0, DeadlineNs: sec / 2, Replicas: []*pb.ReplicaAddr{ra("n2", "10.6.6.6:7946")}},
			{Index: 2, Partition: 2, Parent: 0, DeadlineNs: sec / 2, Replicas: []*pb.ReplicaAddr{ra("evil", "10.6.6.6:7947"), ra("n2", "10.6.6.6:7948")}},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := srv.Serve(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if dialed := d.got(); !slices.Equal(dialed, []string{"n2@rpc-n2"}) {
		t.Fatalf("dialed %v, want only n2 at its announced address", dialed)
	}
	if slices.Sort(out.Partitions); !slices.Equal(out.Partitions, []int32{0, 1}) {
		t.Fatalf("partitions %v, want [0 1]: the forged child contributes nothing", out.Partitions)
	}
}

// A request over the node's limits is refused before anything runs or is
// dialed, as InvalidArgument naming the limit: a deadline or grace over
// MaxDeadline (so a caller cannot make the node hold its part for as long
// as it likes), a participant's deadline over it, a negative elapsed time
// (which would move the call's start, and so its deadline, into the
// future) and more participants than MaxParticipants (the fan-out). A
// request within the limits runs.
func TestServerRefusesRequestsOverItsLimits(t *testing.T) {
	d := &recorder{}
	ran := 0
	agg := &service.Aggregator{
		Local:  map[string]service.LocalFunc{"l": func(context.Context, int, []byte) ([]byte, error) { ran++; return []byte("a"), nil }},
		Reduce: map[string]service.ReduceFunc{"r": func(_ context.Context, a, b, _ []byte) ([]byte, error) { return append(slices.Clone(a), b...), nil }},
	}
	srv := NewServer(ServerConfig{
		Self:        "n1",
		Services:    hosting{Hosted{Operators: agg, Partitions: []int32{0}, Workers: directWorkers{}, Ledger: &dac.Ledger{}}},
		Caller:      NewCaller(Config{Directory: yellow, Dialer: d}),
		MaxDeadline: 2 * time.Second, MaxParticipants: 3,
	})
	sec := int64(time.Second)
	valid := func() *pb.AggregateRequest {
		return &pb.AggregateRequest{
			CallId: "t", Service: "svc", Local: "l", Reduce: "r", Self: 0, DeadlineNs: sec, GraceNs: int64(10 * time.Millisecond),
			Participants: []*pb.Participant{
				{Index: 0, Partition: 0, Parent: -1, DeadlineNs: sec, Replicas: []*pb.ReplicaAddr{ra("n1", "rpc-n1")}},
				{Index: 1, Partition: 1, Parent: 0, DeadlineNs: sec / 2, Replicas: []*pb.ReplicaAddr{ra("n2", "rpc-n2")}},
			},
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, want string
		edit       func(*pb.AggregateRequest)
	}{
		{"an hour's deadline", "deadline 1h0m0s outside 0..2s", func(r *pb.AggregateRequest) { r.DeadlineNs = int64(time.Hour) }},
		{"an hour's grace", "grace 1h0m0s outside 0..2s", func(r *pb.AggregateRequest) { r.GraceNs = int64(time.Hour) }},
		{"a child's deadline of an hour", "participant 1's deadline 1h0m0s", func(r *pb.AggregateRequest) { r.Participants[1].DeadlineNs = int64(time.Hour) }},
		{"a negative deadline", "deadline -1s outside", func(r *pb.AggregateRequest) { r.DeadlineNs = -sec }},
		{"a negative elapsed time", "negative elapsed time", func(r *pb.AggregateRequest) { r.ElapsedNs = -int64(time.Hour) }},
		{"too many participants", "4 participants, over this node's limit of 3", func(r *pb.AggregateRequest) {
			for i := range 2 {
				r.Participants = append(r.Participants, &pb.Participant{Index: int32(2 + i), Partition: 1, Parent: 0, DeadlineNs: sec / 2})
			}
		}},
	} {
		in := valid()
		tc.edit(in)
		_, err := srv.Serve(ctx, in)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "NodeConfig.MaxAggregate") && tc.want != "negative elapsed time" {
			t.Errorf("%s: %v, want InvalidArgument containing %q and naming the NodeConfig limit", tc.name, err, tc.want)
		}
	}
	if ran != 0 || len(d.got()) != 0 {
		t.Fatalf("refused requests ran %d local operators and dialed %v", ran, d.got())
	}
	if _, err := srv.Serve(ctx, valid()); err != nil || ran != 1 {
		t.Fatalf("a request within the limits: %v (ran %d)", err, ran)
	}
}
