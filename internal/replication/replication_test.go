package replication

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// The tests of timing behaviour here run the runtime on a manual clock:
// time moves only when a test advances it, and settle waits (on channels,
// not on time) until the partition loop has handled everything up to now.

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeDir is the yellow pages: every node has an address; hosts lists the
// nodes announcing the partition.
type fakeDir struct {
	mu    sync.Mutex
	hosts []string
}

func (d *fakeDir) RPCAddr(node string) string { return "addr-" + node }
func (d *fakeDir) Hosts(string, int32) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hosts
}

// fakeSender stands for peers that never answer: a delivery that
// succeeded would count as hearing from the peer, at whatever clock time
// the sender goroutine got to it. It records the election requests it was
// given (votes, or pre-votes, which ask for votes without changing any
// epoch).
type fakeSender struct {
	mu        sync.Mutex
	campaigns int
	// delivers: calls succeed, but the peers never reply (reachable and
	// silent), so the failure detector does not suspect them.
	delivers bool
}

func (s *fakeSender) Replicate(_ context.Context, _, _ string, b *pb.ReplicaBatch) error {
	for _, m := range b.Messages {
		if t := replica.MsgType(m.Type).String(); t == "Vote" && !m.Reject || t == "PreVote" {
			s.mu.Lock()
			s.campaigns++
			s.mu.Unlock()
		}
	}
	if s.delivers {
		return nil
	}
	return errors.New("peer does not answer")
}

// campaigned reports whether the replica asked for votes (or pre-votes):
// it waits a little real time for the sender goroutines to deliver.
func (s *fakeSender) campaigned() bool {
	time.Sleep(20 * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.campaigns > 0
}

func (*fakeSender) Forward(context.Context, string, string, *pb.CallRequest) (*pb.CallResponse, error) {
	return nil, errors.New("no forwarding in this test")
}

type execFunc func(ctx context.Context, req *service.Request) (Result, error)

func (f execFunc) Execute(ctx context.Context, req *service.Request) (Result, error) {
	return f(ctx, req)
}

// startPart runs self's replica of kv partition 0 (replicas a, b, c with
// priorities 3, 2, 1, level 2) on a manual clock.
func startPart(t *testing.T, self string, hosts ...string) (*Runtime, *part, *clock.Manual) {
	return startPartWith(t, &fakeSender{}, self, hosts...)
}

func startPartWith(t *testing.T, snd Sender, self string, hosts ...string) (*Runtime, *part, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(t0)
	rt := New(Config{Self: self, DataDir: t.TempDir(), Directory: &fakeDir{hosts: hosts}, Sender: snd, Clock: clk})
	rep := &service.Replication{Level: 2, Replicas: map[int][]service.ReplicaSpec{0: {{Node: "a", Priority: 3}, {Node: "b", Priority: 2}, {Node: "c", Priority: 1}}}}
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
	if err := clk.BlockUntilContext(ctx, 5); err != nil { // the loop's ticker, the heartbeat keeper's, the prober's, the releaser's and the disk watchdog's
		t.Fatal(err)
	}
	return rt, p, clk
}

// settle returns once p's loop has handled every event so far and ticked
// for the clock's current time: the second op runs only after the loop
// iteration of the first finished (tick and Ready processing included).
func settle(t *testing.T, p *part) {
	t.Helper()
	done := make(chan struct{})
	// The loop publishes its status after every event, the last op's too:
	// settle returns only after that publish, so a status a test publishes
	// next is not overwritten by the loop's (the loop is then idle).
	var published <-chan struct{}
	for _, op := range []func(time.Time){func(time.Time) {}, func(time.Time) { published = p.statusChanged(); close(done) }} {
		select {
		case p.ops <- op:
		case <-time.After(5 * time.Second):
			t.Fatal("partition loop not taking operations")
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("partition loop stuck")
	}
	select {
	case <-published:
	case <-time.After(5 * time.Second):
		t.Fatal("partition loop did not publish after an operation")
	}
}

// advance moves the clock by d in tick steps, letting the loop handle
// each step.
func advance(t *testing.T, p *part, clk *clock.Manual, d time.Duration) {
	t.Helper()
	for ; d > 0; d -= tickEvery {
		clk.Advance(min(d, tickEvery))
		settle(t, p)
	}
}

func epoch(p *part) replica.Epoch { return p.status.Load().Epoch }

// TestElectionTimeoutFiresOnlyAfterTheClockAdvances: a fresh replica with
// the highest priority waits ElectionTimeout (300 ms) for a running
// primary to reach it, and the lease (400 ms) that any primary it might
// not have heard of could hold, before it calls an election (asks its
// reachable but silent peers for votes or pre-votes), however long it
// runs in real time.
func TestElectionTimeoutFiresOnlyAfterTheClockAdvances(t *testing.T) {
	snd := &fakeSender{delivers: true}
	_, p, clk := startPartWith(t, snd, "a", "a", "b", "c")
	advance(t, p, clk, tickEvery) // first tick: the replica starts counting
	for range 50 {
		settle(t, p) // real time passes; the clock does not
	}
	advance(t, p, clk, 300*time.Millisecond-tickEvery)
	if e := epoch(p); e != 0 || snd.campaigned() {
		t.Fatalf("election (epoch %d) %v after start, before ElectionTimeout", e, clk.Since(t0))
	}
	advance(t, p, clk, 100*time.Millisecond+tickEvery)
	if !snd.campaigned() {
		t.Fatalf("no election %v after start (ElectionTimeout and Lease passed): epoch %d, no vote asked for", clk.Since(t0), epoch(p))
	}
}

// TestSilentPrimaryIsSuspectedAfterAckTimeout: a secondary that stops
// hearing from its primary (announced alive all along) keeps following it
// until AckTimeout (500 ms) of silence, then suspects it and, as the
// highest-priority replica left, calls an election.
func TestSilentPrimaryIsSuspectedAfterAckTimeout(t *testing.T) {
	rt, p, clk := startPart(t, "b", "a", "b", "c")
	snd := rt.cfg.Sender.(*fakeSender)
	heartbeat := &pb.ReplicaBatch{From: "a", Messages: []*pb.ReplicaMessage{
		toPBMessage(partKey{"kv", 0}, replica.Message{Type: replica.MsgAppend, From: "a", To: "b", Epoch: 1, InSync: true})}}
	advance(t, p, clk, tickEvery)
	rt.Replicate(heartbeat)
	settle(t, p)
	if st := p.status.Load(); st.Primary != "a" || st.Epoch != 1 {
		t.Fatalf("after a's heartbeat: primary %q epoch %d", st.Primary, st.Epoch)
	}
	heard := clk.Now()
	advance(t, p, clk, 490*time.Millisecond)
	if !rt.det.alive("a", clk.Now(), true, true, p.cfg.AckTimeout) || epoch(p) != 1 || snd.campaigned() {
		t.Fatalf("primary suspected (epoch %d) after %v of silence, before AckTimeout", epoch(p), clk.Since(heard))
	}
	advance(t, p, clk, 20*time.Millisecond)
	if rt.det.alive("a", clk.Now(), true, true, p.cfg.AckTimeout) {
		t.Fatalf("primary still alive after %v of silence", clk.Since(heard))
	}
	if !snd.campaigned() {
		t.Fatalf("no election after the primary fell silent: epoch %d, no vote asked for", epoch(p))
	}
}

// TestWriteWithoutPrimaryExpiresAfterWriteWait: with the only other
// replica of a two-replica majority missing, no primary can exist; a write
// waits WriteWait (1 s) on the clock, then fails with the retryable
// ErrNoPrimary (it was never logged).
func TestWriteWithoutPrimaryExpiresAfterWriteWait(t *testing.T) {
	rt, p, clk := startPart(t, "b", "b")
	advance(t, p, clk, tickEvery)
	got := make(chan error, 1)
	go func() {
		_, err := rt.Serve(context.Background(), &pb.CallRequest{Service: "kv", Partition: 0, Method: "put", Mode: pb.Mode_MODE_WRITE},
			func(context.Context) (*service.Response, error) {
				return nil, errors.New("a write is not served locally")
			})
		got <- err
	}()
	for proposed := false; !proposed; { // wait until the loop holds the write
		ok := make(chan bool)
		p.ops <- func(time.Time) { ok <- len(p.pending) == 1 }
		proposed = <-ok
	}
	advance(t, p, clk, time.Second-tickEvery)
	select {
	case err := <-got:
		t.Fatalf("write answered %v after %v, before WriteWait", err, clk.Since(t0))
	default:
	}
	advance(t, p, clk, 2*tickEvery)
	select {
	case err := <-got:
		if !errors.Is(err, nerr.ErrNoPrimary) || !nerr.Retryable(err) {
			t.Fatalf("write without primary: %v, want the retryable ErrNoPrimary", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("write still waiting after WriteWait")
	}
}

// TestOneFailedReplicateCallIsNotDeath: a single failed call (a busy peer
// timing out) leaves the peer alive; suspectAfter in a row make it dead
// for suspectFor; hearing from it clears both; a suspicion lapses after
// suspectFor on the clock.
func TestOneFailedReplicateCallIsNotDeath(t *testing.T) {
	clk := clock.NewManual(t0)
	d := newDetector(clk)
	alive := func() bool { return d.alive("p", clk.Now(), true, false, 500*time.Millisecond) }
	step := func() { clk.Advance(time.Millisecond) } // events happen at distinct times
	d.callFailed("p")
	if !alive() {
		t.Fatal("dead after one failed call")
	}
	step()
	d.heardFrom("p")
	step()
	d.callFailed("p")
	if !alive() {
		t.Fatal("dead after failed, heard, failed: the count did not reset")
	}
	step()
	d.callFailed("p")
	if alive() {
		t.Fatalf("alive after %d failed calls in a row", suspectAfter)
	}
	step()
	d.heardFrom("p")
	if !alive() {
		t.Fatal("still dead after hearing from the peer")
	}
	step()
	d.unreachable("p") // a forwarded write found it unreachable
	if alive() {
		t.Fatal("alive right after a forward found it unreachable")
	}
	clk.Advance(suspectFor - time.Millisecond)
	if alive() {
		t.Fatal("suspicion lapsed early")
	}
	clk.Advance(time.Millisecond)
	if !alive() {
		t.Fatalf("announced peer still suspected %v later", suspectFor)
	}
}

// appendOf is an append carrying a full MaxBatch window of 1 KiB bodies,
// about 270 KiB encoded: what a lagging replica is sent.
func appendOf(lsn replica.LSN) *pb.ReplicaMessage {
	m := replica.Message{Type: replica.MsgAppend, From: "a", To: "b", PrevLSN: lsn - 1}
	for i := range 256 {
		m.Entries = append(m.Entries, replica.Entry{LSN: lsn + replica.LSN(i), Method: "put", Body: make([]byte, 1024)})
	}
	return toPBMessage(partKey{"kv", 0}, m)
}

// The queue to a slow peer must stay bounded in bytes, not only in
// messages, and each Replicate call must fit gRPC's 4 MiB receive limit.
func TestPeerQueueBoundsBytesAndBatches(t *testing.T) {
	pq := newPeerQueue()
	const pushed = 400 // ~100 MiB if kept
	for i := range pushed {
		pq.push(appendOf(replica.LSN(1 + 256*i)))
	}
	if pq.bytes > peerQueueBytes || len(pq.q) == pushed {
		t.Fatalf("queue holds %d messages, %d bytes; byte bound %d", len(pq.q), pq.bytes, peerQueueBytes)
	}
	if len(pq.q) == 0 || pq.q[len(pq.q)-1].PrevLsn != 256*(pushed-1) {
		t.Fatal("the newest message was dropped")
	}
	held := len(pq.q)
	got := 0
	for {
		batch, _ := pq.take(batchBytes)
		if len(batch) == 0 {
			break
		}
		size := 0
		for _, pm := range batch {
			size += proto.Size(pm)
		}
		if size > batchBytes {
			t.Fatalf("one call carries %d bytes, cap %d", size, batchBytes)
		}
		got += len(batch)
	}
	if got != held || pq.bytes != 0 {
		t.Fatalf("took %d of %d messages, %d bytes left", got, held, pq.bytes)
	}
	// A message larger than the cap still goes, alone.
	big := appendOf(1)
	big.Entries[0].Body = make([]byte, 2*batchBytes)
	pq.push(big)
	pq.push(appendOf(257))
	if b, _ := pq.take(batchBytes); len(b) != 1 || b[0] != big {
		t.Fatalf("oversized message: took %d messages", len(b))
	}
}
