package replication

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// The read gating tests stand in for the replica's status: they publish
// statuses themselves (the loop publishes only when the manual clock moves
// or an event arrives, so a published status stays until then) and answer
// for the loop when a linearizable read asks for the read index. They test
// the shell's rules, whatever the core does to reach those statuses.

// forwardSender records forwarded calls and answers them.
type forwardSender struct {
	fakeSender
	mu  sync.Mutex
	got []string // the nodes forwarded to
}

func (s *forwardSender) Forward(_ context.Context, node, _ string, _ *pb.CallRequest) (*pb.CallResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, node)
	return &pb.CallResponse{Body: []byte("from " + node), Version: 7}, nil
}

func (s *forwardSender) forwarded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

// startGated runs b's replica of kv partition 0 (replicas a, b, c) at
// level with linearizable set, on a manual clock, and settles it.
func startGated(t *testing.T, level int, linearizable bool) (*Runtime, *part, *clock.Manual, *forwardSender) {
	t.Helper()
	clk := clock.NewManual(t0)
	snd := &forwardSender{}
	rt := New(Config{Self: "b", DataDir: t.TempDir(), Directory: &fakeDir{hosts: []string{"a", "b", "c"}}, Sender: snd, Clock: clk})
	rep := &service.Replication{Level: level, Linearizable: linearizable, WriteWait: time.Second,
		Replicas: map[int][]service.ReplicaSpec{0: {{Node: "a", Priority: 3}, {Node: "b", Priority: 2}, {Node: "c", Priority: 1}}}}
	err := rt.Register(Partition{Service: "kv", Partition: 0, Replication: rep, Executor: execFunc(func(context.Context, *service.Request) (Result, error) {
		return Result{Resp: &service.Response{}}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	p := rt.parts[partKey{"kv", 0}]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, 5); err != nil { // the loop's, the keeper's, the prober's, the releaser's and the disk watchdog's tickers
		t.Fatal(err)
	}
	settle(t, p)
	return rt, p, clk, snd
}

// readResult is a read's outcome and whether the replica ran it.
type readResult struct {
	resp  *service.Response
	err   error
	local bool
}

// read starts a read of kv partition 0 at rt; the result arrives on the
// channel. It forgets earlier reads' waits, so that waiting sees this one.
func read(rt *Runtime, minVersion uint64) <-chan readResult {
	p := rt.parts[partKey{"kv", 0}]
	p.changedMu.Lock()
	p.watched = false
	p.changedMu.Unlock()
	out := make(chan readResult, 1)
	go func() {
		ran := false
		resp, err := rt.Serve(context.Background(), &pb.CallRequest{Service: "kv", Partition: 0, Method: "get", Mode: pb.Mode_MODE_READ, MinVersion: minVersion},
			func(context.Context) (*service.Response, error) {
				ran = true
				return &service.Response{Body: []byte("local")}, nil
			})
		out <- readResult{resp, err, ran}
	}()
	return out
}

// waiting returns once the read started last waits for p's status to
// change (it has set its timer by then).
func waiting(t *testing.T, p *part) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.changedMu.Lock()
		w := p.watched
		p.changedMu.Unlock()
		if w {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the read never waited")
		}
		time.Sleep(time.Millisecond)
	}
}

func result(t *testing.T, ch <-chan readResult) readResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("read still pending")
		return readResult{}
	}
}

func pending(t *testing.T, ch <-chan readResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("read answered early: %+v", r)
	default:
	}
}

// Which replica may serve a read, by status.
func TestMayRead(t *testing.T) {
	now := t0.Add(time.Hour)
	primary := func(lease time.Time) *replica.Status {
		return &replica.Status{Role: replica.Primary, Primary: "b", Applied: 10, Commit: 10, LeaseUntil: lease}
	}
	for _, c := range []struct {
		name  string
		level replica.Level
		st    *replica.Status
		min   uint64
		want  bool
	}{
		{"recovering", replica.Level2, &replica.Status{Role: replica.Recovering, Applied: 10}, 0, false},
		{"diverged secondary", replica.Level2, &replica.Status{Role: replica.Secondary, Applied: 10, Diverged: true}, 0, false},
		{"level-2 secondary", replica.Level2, &replica.Status{Role: replica.Secondary, Applied: 10}, 0, true},
		{"level-2 primary without lease", replica.Level2, primary(time.Time{}), 0, true},
		{"level-3 primary with lease", replica.Level3, primary(now.Add(time.Millisecond)), 10, true},
		{"level-3 primary, lease lapsing now", replica.Level3, primary(now), 0, false},
		{"level-3 primary without lease", replica.Level3, primary(time.Time{}), 0, false},
		{"level-3 leased primary behind its version x ago", replica.Level3,
			&replica.Status{Role: replica.Primary, Applied: 10, Commit: 30, VersionAgo: 20, LeaseUntil: now.Add(time.Second)}, 0, false},
		{"level-3 fresh secondary at the session's version", replica.Level3,
			&replica.Status{Role: replica.Secondary, Applied: 10, FreshUntil: now.Add(time.Millisecond)}, 10, true},
		{"level-3 fresh secondary behind the session", replica.Level3,
			&replica.Status{Role: replica.Secondary, Applied: 10, FreshUntil: now.Add(time.Millisecond)}, 11, false},
		{"level-3 secondary whose proof of freshness ran out", replica.Level3,
			&replica.Status{Role: replica.Secondary, Applied: 10, FreshUntil: now}, 0, false},
		{"level-3 secondary without a proof of freshness", replica.Level3, &replica.Status{Role: replica.Secondary, Applied: 10}, 0, false},
		{"level-2 secondary needs no proof", replica.Level2, &replica.Status{Role: replica.Secondary, Applied: 10}, 0, true},
	} {
		if got := mayRead(c.level, c.st, now, c.min); got != c.want {
			t.Errorf("%s: mayRead = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLevel3PrimaryServesOnlyWithItsLease: a level-3 primary whose lease
// lapsed (it may be cut off while a newer primary commits) does not serve
// a read; it waits for its lease and, if none comes within WriteWait,
// fails with the retryable ErrNoPrimary, never having read.
func TestLevel3PrimaryServesOnlyWithItsLease(t *testing.T) {
	rt, p, clk, snd := startGated(t, 3, false)
	p.publish(replica.Status{ID: "b", Role: replica.Primary, Primary: "b", Applied: 4, Commit: 4, LeaseUntil: clk.Now()})
	r := read(rt, 0)
	waiting(t, p)
	pending(t, r)
	// The lease comes back (a majority acknowledged): the read runs.
	p.publish(replica.Status{ID: "b", Role: replica.Primary, Primary: "b", Applied: 4, Commit: 4, LeaseUntil: clk.Now().Add(400 * time.Millisecond)})
	if got := result(t, r); got.err != nil || !got.local || got.resp.Version != 4 {
		t.Fatalf("leased primary: %+v", got)
	}

	// Deposed while the read waits: the read goes to the new primary.
	p.publish(replica.Status{ID: "b", Role: replica.Primary, Primary: "b", Applied: 4, Commit: 4})
	r = read(rt, 0)
	waiting(t, p)
	p.publish(replica.Status{ID: "b", Role: replica.Secondary, Primary: "a", Epoch: 2, Applied: 4, Commit: 4})
	if got := result(t, r); got.err != nil || got.local || string(got.resp.Body) != "from a" {
		t.Fatalf("read at a primary deposed while it waited: %+v, want it forwarded to a", got)
	}
	if f := snd.forwarded(); len(f) != 1 {
		t.Fatalf("forwarded to %v, want [a]", f)
	}

	p.publish(replica.Status{ID: "b", Role: replica.Primary, Primary: "b", Applied: 4, Commit: 4})
	r = read(rt, 0)
	waiting(t, p)
	advance(t, p, clk, time.Second) // WriteWait; the loop publishes the core's own (unleased) status
	got := result(t, r)
	if got.local || !errors.Is(got.err, nerr.ErrNoPrimary) || !nerr.Retryable(got.err) {
		t.Fatalf("primary without a lease: %+v, want the retryable ErrNoPrimary and no read", got)
	}
}

// TestDivergedReplicaServesNothing: a replica that found its log differs
// from the primary's forwards reads to the primary.
func TestDivergedReplicaServesNothing(t *testing.T) {
	rt, p, _, snd := startGated(t, 2, false)
	p.publish(replica.Status{ID: "b", Role: replica.Secondary, Primary: "a", Applied: 9, Commit: 9, Diverged: true})
	got := result(t, read(rt, 0))
	if got.err != nil || got.local || string(got.resp.Body) != "from a" {
		t.Fatalf("diverged secondary: %+v, want the read forwarded to a", got)
	}
	p.publish(replica.Status{ID: "b", Role: replica.Secondary, Primary: "a", Applied: 9, Commit: 9})
	if got := result(t, read(rt, 0)); got.err != nil || !got.local {
		t.Fatalf("healthy level-2 secondary: %+v, want a local read", got)
	}
	if f := snd.forwarded(); len(f) != 1 || f[0] != "a" {
		t.Fatalf("forwarded to %v, want [a]", f)
	}
}

// TestLinearizableReadsGoToTheLeasedPrimaryAndWaitForTheReadIndex: with
// Linearizable, a secondary forwards every read to the primary; the
// primary takes its last entry at the read's arrival (from the loop; at
// or above its commit point) as the read index and reads only once it has
// executed that far, and only while it holds its lease.
func TestLinearizableReadsGoToTheLeasedPrimaryAndWaitForTheReadIndex(t *testing.T) {
	rt, p, clk, snd := startGated(t, 2, true)

	// A secondary, even fully caught up, forwards.
	p.publish(replica.Status{ID: "b", Role: replica.Secondary, Primary: "a", Applied: 9, Commit: 9})
	p.ask = func(context.Context) (replica.Status, time.Time, error) { return *p.status.Load(), clk.Now(), nil }
	if got := result(t, read(rt, 0)); got.err != nil || got.local || string(got.resp.Body) != "from a" {
		t.Fatalf("linearizable read at a secondary: %+v, want it forwarded to a", got)
	}

	// The primary: the loop's commit point is 12 and its last entry 13
	// (a new primary's commit point lags the log it adopted); it has
	// executed 10.
	var mu sync.Mutex
	loop := replica.Status{ID: "b", Role: replica.Primary, Primary: "b", Applied: 10, Commit: 12, Last: 13, LeaseUntil: clk.Now().Add(400 * time.Millisecond)}
	p.ask = func(context.Context) (replica.Status, time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		return loop, clk.Now(), nil
	}
	p.publish(replica.Status{ID: "b", Role: replica.Primary, Primary: "b", Applied: 10, Commit: 10, LeaseUntil: loop.LeaseUntil})
	r := read(rt, 0)
	waiting(t, p)
	pending(t, r)
	p.publish(replica.Status{ID: "b", Role: replica.Primary, Primary: "b", Applied: 11, Commit: 12, LeaseUntil: loop.LeaseUntil})
	waiting(t, p)
	pending(t, r)
	p.publish(replica.Status{ID: "b", Role: replica.Primary, Primary: "b", Applied: 12, Commit: 12, LeaseUntil: loop.LeaseUntil})
	waiting(t, p)
	pending(t, r)
	p.publish(replica.Status{ID: "b", Role: replica.Primary, Primary: "b", Applied: 13, Commit: 13, LeaseUntil: loop.LeaseUntil})
	if got := result(t, r); got.err != nil || !got.local || got.resp.Version != 13 {
		t.Fatalf("linearizable read at the primary: %+v, want a local read at version 13", got)
	}

	// Without a lease (lapsed, or not yet won) the primary waits for one,
	// at most WriteWait, then fails with the retryable ErrNoPrimary.
	mu.Lock()
	loop.LeaseUntil = clk.Now()
	mu.Unlock()
	r = read(rt, 0)
	waiting(t, p)
	pending(t, r)
	advance(t, p, clk, time.Second)
	got := result(t, r)
	if got.local || !errors.Is(got.err, nerr.ErrNoPrimary) || !nerr.Retryable(got.err) {
		t.Fatalf("linearizable read without a lease: %+v, want the retryable ErrNoPrimary and no read", got)
	}
	if f := snd.forwarded(); len(f) != 1 {
		t.Fatalf("forwarded %v, want only the secondary's read", f)
	}
}

// gonePagesDir lists a node until it is told the node left the yellow
// pages (a partition longer than the announcement TTL).
type gonePagesDir struct {
	fakeDir
	mu   sync.Mutex
	gone bool
}

func (d *gonePagesDir) RPCAddr(node string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		return ""
	}
	return "addr-" + node
}

// addrSender records the addresses Replicate calls go to.
type addrSender struct {
	fakeSender
	mu    sync.Mutex
	addrs []string
}

func (s *addrSender) Replicate(_ context.Context, _, addr string, _ *pb.ReplicaBatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs = append(s.addrs, addr)
	return nil
}

// TestReplicationOutlivesTheYellowPages: once a peer has been reached, a
// node keeps calling its last address after the yellow pages drop it, so
// replication heals with the network, not with gossip.
func TestReplicationOutlivesTheYellowPages(t *testing.T) {
	dir := &gonePagesDir{}
	snd := &addrSender{}
	rt := New(Config{Self: "a", DataDir: t.TempDir(), Directory: dir, Sender: snd, Clock: clock.NewManual(t0)})
	rt.ctx = context.Background()
	batch := []*pb.ReplicaMessage{{Service: "kv"}}
	if err := rt.deliver("b", batch, 10, false, 0); err != nil {
		t.Fatal(err)
	}
	dir.mu.Lock()
	dir.gone = true
	dir.mu.Unlock()
	if err := rt.deliver("b", batch, 10, false, 0); err != nil {
		t.Fatalf("delivery to a peer the pages dropped: %v", err)
	}
	if err := rt.deliver("c", batch, 10, false, 0); !errors.Is(err, nerr.ErrNoReplica) {
		t.Fatalf("delivery to a peer never listed: %v, want ErrNoReplica", err)
	}
	snd.mu.Lock()
	defer snd.mu.Unlock()
	if len(snd.addrs) != 2 || snd.addrs[1] != "addr-b" {
		t.Fatalf("calls went to %v, want addr-b twice", snd.addrs)
	}
}

// TestLostPeersAreProbedAtTheirLastAddress: a peer replica the yellow
// pages dropped (a partition longer than the announcement TTL) and not
// heard from is sent an empty Replicate call at its last address every
// probeEvery; the answer makes it alive again, without waiting for gossip.
func TestLostPeersAreProbedAtTheirLastAddress(t *testing.T) {
	clk := clock.NewManual(t0)
	dir := &gonePagesDir{}
	snd := &addrSender{}
	rt := New(Config{Self: "a", DataDir: t.TempDir(), Directory: dir, Sender: snd, Clock: clk})
	rep := &service.Replication{Level: 2, Replicas: map[int][]service.ReplicaSpec{0: {{Node: "a", Priority: 3}, {Node: "b", Priority: 2}, {Node: "c", Priority: 1}}}}
	if err := rt.Register(Partition{Service: "kv", Partition: 0, Replication: rep, Executor: execFunc(func(context.Context, *service.Request) (Result, error) {
		return Result{Resp: &service.Response{}}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	p := rt.parts[partKey{"kv", 0}]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, 5); err != nil {
		t.Fatal(err)
	}
	probes := func() int {
		snd.mu.Lock()
		defer snd.mu.Unlock()
		return len(snd.addrs)
	}
	advance(t, p, clk, probeEvery) // the prober learns b's and c's addresses
	for known := false; !known; time.Sleep(time.Millisecond) {
		rt.mu.Lock()
		known = rt.addrs["b"] != "" && rt.addrs["c"] != ""
		rt.mu.Unlock()
	}
	dir.mu.Lock()
	dir.gone = true
	dir.mu.Unlock()
	before := probes()
	if rt.det.alive("b", clk.Now().Add(suspectFor), false, false, time.Second) {
		t.Fatal("b alive though neither listed nor heard from")
	}
	advance(t, p, clk, suspectFor+probeEvery)
	deadline := time.Now().Add(5 * time.Second)
	for !rt.det.alive("b", clk.Now(), false, false, time.Second) || !rt.det.alive("c", clk.Now(), false, false, time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("b and c not probed back to life; %d calls after the pages dropped them", probes()-before)
		}
		time.Sleep(time.Millisecond)
	}
}
