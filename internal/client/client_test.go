package client

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestResolveNeedsOnlyTheYellowPages: what is wrong with a call shows in
// the lookup, before any replica is polled or called; a right call takes
// its mode (and a read its session floor) from the announced method.
func TestResolveNeedsOnlyTheYellowPages(t *testing.T) {
	live := []membership.Replica{{Node: "a"}}
	put := &pb.MethodInfo{Name: "put", Mode: pb.Mode_MODE_WRITE}
	get := &pb.MethodInfo{Name: "get", Mode: pb.Mode_MODE_READ}
	chunks := &pb.MethodInfo{Name: "chunks", Mode: pb.Mode_MODE_READ, Stream: true}
	for _, tc := range []struct {
		name   string
		look   membership.Lookup
		stream bool
		want   error
	}{
		{"unknown service", membership.Lookup{}, false, nerr.ErrUnknownService},
		{"unknown partition", membership.Lookup{ServiceKnown: true, Method: put}, false, nerr.ErrUnknownPartition},
		{"no live replica", membership.Lookup{ServiceKnown: true, PartitionKnown: true}, false, nerr.ErrNoReplica},
		{"unknown method", membership.Lookup{ServiceKnown: true, PartitionKnown: true, Replicas: live}, false, nerr.ErrUnknownMethod},
		{"stream method through Call", membership.Lookup{ServiceKnown: true, PartitionKnown: true, Replicas: live, Method: chunks}, false, nerr.ErrWrongMode},
		{"plain method through Stream", membership.Lookup{ServiceKnown: true, PartitionKnown: true, Replicas: live, Method: get}, true, nerr.ErrWrongMode},
		{"write", membership.Lookup{ServiceKnown: true, PartitionKnown: true, Replicas: live, Method: put}, false, nil},
	} {
		r := &request{in: &pb.CallRequest{Service: "kv", Method: "m"}, stream: tc.stream}
		if err := r.resolve(tc.look); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	sess := NewSession()
	sess.observe("kv", 3, 42)
	for _, tc := range []struct {
		m       *pb.MethodInfo
		mode    pb.Mode
		version uint64
	}{{put, pb.Mode_MODE_WRITE, 0}, {get, pb.Mode_MODE_READ, 42}} {
		r := &request{in: &pb.CallRequest{Service: "kv", Partition: 3, Method: tc.m.Name}, sess: sess}
		if err := r.resolve(membership.Lookup{ServiceKnown: true, PartitionKnown: true, Replicas: live, Method: tc.m}); err != nil {
			t.Fatal(err)
		}
		if r.in.Mode != tc.mode || r.in.MinVersion != tc.version {
			t.Errorf("%s: mode %v floor %d, want %v %d", tc.m.Name, r.in.Mode, r.in.MinVersion, tc.mode, tc.version)
		}
	}
}

var now = time.Unix(1000, 0)

// announce is node's announcement of kv partition 0 in the given role (a
// primary with its lease).
func announce(node string, role replica.Role, epoch uint64, level int32) membership.Entry {
	var lease uint32
	if role == replica.Primary {
		lease = 300
	}
	return announceStatus(node, &pb.ReplicaStatus{Partition: 0, Role: int32(role), Epoch: epoch, Level: level, VersionAgo: 7, LeaseMs: lease})
}

func announceStatus(node string, st *pb.ReplicaStatus) membership.Entry {
	return membership.Entry{Expires: now.Add(time.Second), Ann: &pb.Announcement{NodeId: node, Services: []*pb.HostedService{{
		Name: "kv", Partitions: []int32{0}, Replicas: []*pb.ReplicaStatus{st},
	}}}}
}

// TestViewsFollowMembership: the replica view of a partition changes as
// announcements arrive and nodes leave, without rescanning the pages.
func TestViewsFollowMembership(t *testing.T) {
	c := &Client{}
	c.views.init()
	w := (*viewWatcher)(c)
	w.Applied(announce("a", replica.Primary, 1, 2))
	w.Applied(announce("b", replica.Secondary, 1, 2))
	w.Applied(announce("c", replica.Recovering, 1, 2))
	v := c.views.of[partKey{"kv", 0}]
	if !slices.Equal(v.nodes, []string{"a", "b", "c"}) || v.level != 2 {
		t.Fatalf("view = %+v", v)
	}
	w.Applied(announce("b", replica.Primary, 2, 2)) // failover: b is primary at epoch 2
	w.Removed("a")
	v = c.views.of[partKey{"kv", 0}]
	if r := v.route(now, &pb.CallRequest{Mode: pb.Mode_MODE_WRITE}, []string{"b", "c"}); r.direct != "b" {
		t.Fatalf("write routed %+v, want straight to the new primary b", r)
	}
	// c announces it no longer hosts the partition: it leaves the view.
	w.Applied(membership.Entry{Expires: now.Add(time.Second), Ann: &pb.Announcement{NodeId: "c"}})
	w.Removed("b")
	if _, ok := c.views.of[partKey{"kv", 0}]; ok {
		t.Fatal("view of a partition nobody announces still kept")
	}
}

// TestRouteAppliesReplicationsRules: one place decides what replication
// says about a pick.
func TestRouteAppliesReplicationsRules(t *testing.T) {
	c := &Client{}
	c.views.init()
	w := (*viewWatcher)(c)
	for _, e := range []membership.Entry{announce("a", replica.Primary, 1, 3), announce("b", replica.Secondary, 1, 3), announce("c", replica.Recovering, 1, 3)} {
		w.Applied(e)
	}
	v := c.views.of[partKey{"kv", 0}]
	ids := []string{"a", "b", "c"}
	read := &pb.CallRequest{Mode: pb.Mode_MODE_READ, MinVersion: 9}
	r := v.route(now, read, ids)
	if r.direct != "" || !slices.Equal(r.candidates, []string{"a", "b"}) || r.mustPoll(r.candidates) != "a" {
		t.Fatalf("level-3 read: %+v, want candidates a b (c recovers) and a poll of the primary", r)
	}
	answers := []transport.PollAnswer{
		{Replica: "a", Version: transport.Version{Serving: true, Primary: true, Version: 20, VersionAgo: 12, Lease: 300 * time.Millisecond}},
		{Replica: "b", Version: transport.Version{Serving: true, Version: 11}},
	}
	if keep, ok := r.fresh(r.candidates, answers); !ok || !slices.Equal(keep, []string{"a"}) {
		t.Fatalf("fresh = %v, %v; want only a: b (11) is behind the primary's version x ago (12)", keep, ok)
	}
	answers[1].Version.Version = 12
	if keep, _ := r.fresh(r.candidates, answers); !slices.Equal(keep, []string{"a", "b"}) {
		t.Fatalf("fresh = %v, want a and b", keep)
	}
	for _, id := range ids {
		(*viewWatcher)(c).Removed(id)
	}
	if r := c.views.of[partKey{"kv", 0}].route(now, read, ids); r.level != 0 || len(r.candidates) != 3 {
		t.Fatalf("the view of nodes that left the yellow pages still routes: %+v", r)
	}
	var none *replicaView
	if r := none.route(now, read, ids); r.direct != "" || len(r.candidates) != 3 || r.mustPoll(ids) != "" {
		t.Fatalf("unreplicated partition routed %+v", r)
	}
	if _, ok := (route{}).fresh(ids, answers); ok {
		t.Fatal("unreplicated partition filtered by freshness")
	}
}

// TestRouteHonoursLeasesDivergenceAndLinearizability: a level-3 primary
// without its lease is not fresh (no replica can be shown fresh then, so
// only the primary remains, which serves once leased or fails the read
// retryably); a diverged replica is no candidate; a linearizable
// service's reads go straight to the primary.
func TestRouteHonoursLeasesDivergenceAndLinearizability(t *testing.T) {
	c := &Client{}
	c.views.init()
	w := (*viewWatcher)(c)
	w.Applied(announceStatus("a", &pb.ReplicaStatus{Role: int32(replica.Primary), Epoch: 1, Level: 3, VersionAgo: 0}))
	w.Applied(announce("b", replica.Secondary, 1, 3))
	w.Applied(announceStatus("c", &pb.ReplicaStatus{Role: int32(replica.Secondary), Epoch: 1, Level: 3, Diverged: true}))
	v := c.views.of[partKey{"kv", 0}]
	ids := []string{"a", "b", "c"}
	read := &pb.CallRequest{Mode: pb.Mode_MODE_READ}
	r := v.route(now, read, ids)
	if r.direct != "" || !slices.Equal(r.candidates, []string{"a", "b"}) {
		t.Fatalf("level-3 read: %+v, want candidates a b (c diverged)", r)
	}
	answers := []transport.PollAnswer{
		{Replica: "a", Version: transport.Version{Serving: true, Primary: true, Version: 20}},
		{Replica: "b", Version: transport.Version{Serving: true, Version: 20}},
	}
	if keep, ok := r.fresh(r.candidates, answers); !ok || !slices.Equal(keep, []string{"a"}) {
		t.Fatalf("fresh = %v, %v; want only the primary: without its lease nobody is provably fresh", keep, ok)
	}
	// The primary's current answer shows its lease: b qualifies.
	answers[0].Version.Lease, answers[0].Version.VersionAgo = 250*time.Millisecond, 18
	if keep, _ := r.fresh(r.candidates, answers); !slices.Equal(keep, []string{"a", "b"}) {
		t.Fatalf("fresh = %v, want a and b", keep)
	}
	// Without the primary's answer only the primary remains, whatever
	// its announcement said.
	w.Applied(announceStatus("a", &pb.ReplicaStatus{Role: int32(replica.Primary), Epoch: 1, Level: 3, LeaseMs: 300, VersionAgo: 3}))
	r = c.views.of[partKey{"kv", 0}].route(now, read, ids)
	if keep, _ := r.fresh(r.candidates, answers[1:]); !slices.Equal(keep, []string{"a"}) {
		t.Fatalf("fresh without the primary's answer = %v, want only a", keep)
	}

	w.Applied(announceStatus("a", &pb.ReplicaStatus{Role: int32(replica.Primary), Epoch: 1, Level: 2, Linearizable: true, LeaseMs: 200}))
	v = c.views.of[partKey{"kv", 0}]
	if r := v.route(now, read, ids); r.direct != "a" {
		t.Fatalf("linearizable read routed %+v, want straight to the primary a", r)
	}
}
