package membership

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestListenerLearnsEveryMemberAndKeepsThem starts a dozen announcing
// members and a listener that joins through one seed. Every member must learn
// of the listener (or it would never announce itself to it) so that the
// listener's entries stay fresh past the TTL. With memberlist's local profile
// (2·log10(n+1) retransmits) some members missed the joiner for 15 s.
func TestListenerLearnsEveryMemberAndKeepsThem(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 13 memberlist instances")
	}
	ctx := context.Background()
	const n, ttl = 12, time.Second
	var members []*Gossip
	for i := range n {
		cfg := Config{
			NodeID: fmt.Sprintf("m%02d", i), BindAddr: "127.0.0.1",
			AnnounceInterval: 100 * time.Millisecond, TTL: ttl,
			Announce: func() *pb.Announcement {
				return &pb.Announcement{Services: []*pb.HostedService{{Name: "svc", Partitions: []int32{0}}}}
			},
		}
		if i > 0 {
			cfg.Join = []string{members[0].Addr()}
		}
		g, err := Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		members = append(members, g)
	}
	listener, err := Start(ctx, Config{NodeID: "listener", BindAddr: "127.0.0.1", Join: []string{members[n-1].Addr()}, AnnounceInterval: 100 * time.Millisecond, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	// Past two TTLs, every entry the listener holds must have been refreshed
	// by its member directly.
	time.Sleep(2*ttl + 200*time.Millisecond)
	for _, m := range members {
		if got := m.Members(); got != n+1 {
			t.Errorf("%s knows %d members, want %d", m.cfg.NodeID, got, n+1)
		}
	}
	if got := len(listener.Replicas("svc", 0).Replicas); got != n {
		t.Fatalf("listener sees %d of %d members after 2 TTLs", got, n)
	}
}
