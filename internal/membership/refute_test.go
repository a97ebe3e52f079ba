package membership

import (
	"context"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestOwnAnnouncementComingBackIsNotRefuted: a member's own announcement
// relayed back, or in a peer's state, leaves its incarnation alone; one
// newer than any it made (another process with its id) is refuted with a
// higher incarnation. Refuting its own echo bumped both members'
// incarnations at every state exchange.
func TestOwnAnnouncementComingBackIsNotRefuted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	g, err := Start(ctx, Config{NodeID: "a", BindAddr: "127.0.0.1", Clock: clk, Announce: func() *pb.Announcement {
		return &pb.Announcement{Services: []*pb.HostedService{{Name: "svc", Partitions: []int32{0}}}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.Announce()
	incSeq := func() (int64, uint64) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.inc, g.seq
	}
	inc, seq := incSeq()
	now := clk.Now()
	for _, echo := range []*pb.Announcement{
		{NodeId: "a", Incarnation: inc, Seq: seq},
		{NodeId: "a", Incarnation: inc, Seq: seq - 1},
		{NodeId: "a", Incarnation: inc - 1, Seq: seq + 5},
	} {
		g.receive(now, now, echo, nil, msgSpread)
		if got, _ := incSeq(); got != inc {
			t.Fatalf("own announcement (incarnation %d, seq %d) came back: incarnation %d, want %d unchanged", echo.Incarnation, echo.Seq, got, inc)
		}
	}
	g.receive(now, now, &pb.Announcement{NodeId: "a", Incarnation: inc, Seq: seq + 1}, nil, msgSpread)
	if got, _ := incSeq(); got != inc+1 {
		t.Fatalf("an announcement of its id newer than its own: incarnation %d, want %d", got, inc+1)
	}
}
