package membership

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestListenerLearnsEveryMemberAndKeepsThem starts a dozen announcing
// members and a listener that joins through one seed. Every member must learn
// of the listener (or it would never announce itself to it) so that the
// listener's entries stay fresh past the TTL. With memberlist's local profile
// (2·log10(n+1) retransmits) some members missed the joiner for 15 s.
//
// Memberlist's dissemination runs on real time; the announcements and the
// yellow pages' expiry run on a manual clock that the test steps through
// two TTLs.
func TestListenerLearnsEveryMemberAndKeepsThem(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 13 memberlist instances")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n, ttl, interval = 12, time.Second, 100 * time.Millisecond
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	var members []*Gossip
	for i := range n {
		cfg := Config{
			NodeID: fmt.Sprintf("m%02d", i), BindAddr: "127.0.0.1",
			AnnounceInterval: interval, TTL: ttl, Clock: clk,
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
	listener, err := Start(ctx, Config{NodeID: "listener", BindAddr: "127.0.0.1", Join: []string{members[n-1].Addr()},
		AnnounceInterval: interval, TTL: ttl, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()

	// Every member learns of the listener through memberlist's gossip
	// (real time; generous, since under the race detector on a busy
	// machine a member took over 2 s to learn of the last joiners).
	allKnow := func() bool {
		for _, m := range members {
			if m.Members() != n+1 {
				return false
			}
		}
		return true
	}
	if !eventually(ctx, 10*time.Second, allKnow) {
		for _, m := range members {
			if got := m.Members(); got != n+1 {
				t.Errorf("%s knows %d members, want %d", m.cfg.NodeID, got, n+1)
			}
		}
		t.FailNow()
	}

	// Step the announcement loops through two TTLs. Each step waits until
	// every loop is back on the clock (it has broadcast) and, within a
	// bound (a datagram may be lost), until the listener holds each
	// member's announcement of this step.
	fresh := func(now time.Time) func() bool {
		return func() bool {
			k := 0
			for _, e := range listener.Snapshot() {
				if e.Seen.Equal(now) {
					k++
				}
			}
			return k == n
		}
	}
	for step := 0; step <= int(2*ttl/interval); step++ {
		if err := clk.BlockUntilContext(ctx, n+1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(interval)
		if !eventually(ctx, time.Second, fresh(clk.Now())) {
			t.Logf("step %d: not every announcement reached the listener", step)
		}
	}
	// Every entry the listener holds was refreshed by its member directly.
	if got := len(listener.Replicas("svc", 0).Replicas); got != n {
		t.Fatalf("listener sees %d of %d members after 2 TTLs", got, n)
	}
}

// eventually reports whether cond holds within d of real time, checking
// every few milliseconds: for what runs on real time (memberlist, UDP
// delivery), not for what the manual clock drives.
func eventually(ctx context.Context, d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// recorder is a Watcher that records what it is told.
type recorder struct {
	mu      sync.Mutex
	applied []string // node ids, in order
	removed []string
}

func (r *recorder) Applied(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, e.Ann.NodeId)
}

func (r *recorder) Removed(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, node)
}

func (r *recorder) saw(applied, removed string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return (applied == "" || slices.Contains(r.applied, applied)) && (removed == "" || slices.Contains(r.removed, removed))
}

// TestWatcherHearsOfAnnouncementsAndDepartures: a watcher learns of a
// member's announcement when the pages take it, and of its departure.
func TestWatcherHearsOfAnnouncementsAndDepartures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	a, err := Start(ctx, Config{NodeID: "a", BindAddr: "127.0.0.1", Clock: clk, Announce: func() *pb.Announcement {
		return &pb.Announcement{Services: []*pb.HostedService{{Name: "svc", Partitions: []int32{0}}}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var w recorder
	b, err := Start(ctx, Config{NodeID: "b", BindAddr: "127.0.0.1", Join: []string{a.Addr()}, Clock: clk, Watch: &w})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !eventually(ctx, 5*time.Second, func() bool { return w.saw("a", "") }) {
		t.Fatal("watcher never heard a's announcement")
	}
	a.Close()
	if !eventually(ctx, 10*time.Second, func() bool { return w.saw("", "a") }) {
		t.Fatal("watcher never heard that a left")
	}
}

// TestAnnounceNowSpreadsAChangeBeforeTheInterval: a member whose state
// changed (a replica became primary) announces it at once, without
// waiting for AnnounceInterval (the manual clock never moves here).
func TestAnnounceNowSpreadsAChangeBeforeTheInterval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	var parts atomic.Int32
	parts.Store(1)
	a, err := Start(ctx, Config{NodeID: "a", BindAddr: "127.0.0.1", Clock: clk, Announce: func() *pb.Announcement {
		var ps []int32
		for p := range parts.Load() {
			ps = append(ps, p)
		}
		return &pb.Announcement{Services: []*pb.HostedService{{Name: "svc", Partitions: ps}}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Start(ctx, Config{NodeID: "b", BindAddr: "127.0.0.1", Join: []string{a.Addr()}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !eventually(ctx, 5*time.Second, func() bool { return len(b.Replicas("svc", 0).Replicas) == 1 }) {
		t.Fatal("b never heard a's first announcement")
	}
	parts.Store(2)
	a.AnnounceNow()
	if !eventually(ctx, 5*time.Second, func() bool { return len(b.Replicas("svc", 1).Replicas) == 1 }) {
		t.Fatal("b did not hear a's changed announcement before the next interval")
	}
}

// TestMembersAloneWithSeedsFindEachOther: two members whose seeds reached
// only themselves at start (a headless Service that listed only the pod
// itself, nodes started at the same moment) are two clusters of one;
// the lone member asks its seeds again until one answers, and they merge.
func TestMembersAloneWithSeedsFindEachOther(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	seed := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	a, err := Start(ctx, Config{NodeID: "a", BindAddr: "127.0.0.1", BindPort: ports[0], Join: []string{seed(ports[0]), seed(ports[1])},
		AnnounceInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Start(ctx, Config{NodeID: "b", BindAddr: "127.0.0.1", BindPort: ports[1], Join: []string{seed(ports[1])},
		AnnounceInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !eventually(ctx, 10*time.Second, func() bool { return a.Members() == 2 && b.Members() == 2 }) {
		t.Fatalf("still apart: a sees %d members, b %d", a.Members(), b.Members())
	}
}
