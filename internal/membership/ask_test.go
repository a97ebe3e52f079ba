package membership

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

func TestPlanAsksWaitsAGraceThenBacksOff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	state := map[string]*asking{}
	if got := planAsks(t0, []string{"a"}, state); len(got) != 0 {
		t.Fatalf("asked %v at once; a new member's announcement usually comes by itself", got)
	}
	if got := planAsks(t0.Add(askGrace/2), []string{"a"}, state); len(got) != 0 {
		t.Fatalf("asked %v within the grace", got)
	}
	var times []time.Duration
	for now := t0; now.Before(t0.Add(10 * time.Minute)); now = now.Add(100 * time.Millisecond) {
		if slices.Equal(planAsks(now, []string{"a"}, state), []string{"a"}) {
			times = append(times, now.Sub(t0))
		}
	}
	if len(times) < 5 || times[0] != askGrace {
		t.Fatalf("asked at %v: want the first ask after the grace (%v) and more after", times, askGrace)
	}
	for i := 2; i < len(times); i++ {
		gap, prev := times[i]-times[i-1], times[i-1]-times[i-2]
		if gap < prev || gap > maxAskBackoff {
			t.Fatalf("asked at %v: gaps must grow up to %v", times, maxAskBackoff)
		}
	}
	if times[len(times)-1]-times[len(times)-2] != maxAskBackoff {
		t.Fatalf("asked at %v: the gap should reach %v", times, maxAskBackoff)
	}
}

func TestPlanAsksBatchesAndForgetsWhoCame(t *testing.T) {
	t0 := time.Unix(1000, 0)
	state := map[string]*asking{}
	many := []string{"a", "b", "c", "d", "e", "f"}
	planAsks(t0, many, state)
	got := planAsks(t0.Add(askGrace), many, state)
	if len(got) != askBatch {
		t.Fatalf("asked %v, want %d at a time", got, askBatch)
	}
	if got := planAsks(t0.Add(askGrace+100*time.Millisecond), many, state); !slices.Equal(got, []string{"e", "f"}) {
		t.Fatalf("next tick asked %v, want those left out before", got)
	}
	planAsks(t0.Add(2*askGrace), []string{"a"}, state)
	if len(state) != 1 || state["a"] == nil {
		t.Fatalf("state %v: members no longer missing must be forgotten", state)
	}
}

// TestAMissingEntryIsAskedFor: a member whose pages lack a live member's
// entry gets it by asking, long before the refresh (a minute here) or
// anti-entropy (30 s) would bring it.
func TestAMissingEntryIsAskedFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ann := func() *pb.Announcement {
		return &pb.Announcement{Services: []*pb.HostedService{{Name: "svc", Partitions: []int32{0}}}}
	}
	cfg := Config{BindAddr: "127.0.0.1", Announce: ann, AnnounceInterval: time.Minute, TTL: 10 * time.Minute}
	var gs []*Gossip
	for _, id := range []string{"a", "b", "c"} {
		c := cfg
		c.NodeID = id
		if len(gs) > 0 {
			c.Join = []string{gs[0].Addr()}
		}
		g, err := Start(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		gs = append(gs, g)
	}
	a := gs[0]
	if !eventually(ctx, 10*time.Second, func() bool { return len(a.Replicas("svc", 0).Replicas) == 3 }) {
		t.Fatal("a never saw all three")
	}
	a.mu.Lock()
	a.pages.Remove(a.cfg.Clock.Now(), "b", WhyGone)
	delete(a.sealed, "b")
	a.mu.Unlock()
	lost := time.Now()
	if !eventually(ctx, askGrace+4*time.Second, func() bool { return len(a.Replicas("svc", 0).Replicas) == 3 }) {
		t.Fatalf("a still lacks b's entry %v after losing it", time.Since(lost).Round(time.Millisecond))
	}
	t.Logf("b's entry back at a after %v", time.Since(lost).Round(time.Millisecond))
}
