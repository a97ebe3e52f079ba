package replication

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestStore is a memCluster node's copy of the service: it executes
// writes, answers CHECK, takes and restores snapshots, and digests its
// state so copies can be compared.
type TestStore interface {
	Executor
	service.Snapshotter
	Check(ctx context.Context, partition int, lsn uint64) (bool, error)
	Digest() string
}

// memStore is one node's copy of a kv partition: it records each write's
// LSN with it, answers CHECK, and takes and restores snapshots. While
// hold is set, Snapshot waits for it to close before it copies the map
// (a slow snapshot: writes go on meanwhile).
type memStore struct {
	mu   sync.Mutex
	kv   map[string]string
	lsn  uint64
	hold chan struct{}
	took uint64 // the LSN of the last image taken
}

func newMemStore() *memStore { return &memStore{kv: map[string]string{}} }

func (s *memStore) Execute(_ context.Context, req *service.Request) (Result, error) {
	k, v, _ := bytes.Cut(req.Body, []byte("="))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv[string(k)] = string(v)
	s.lsn = req.LSN
	return Result{Resp: &service.Response{}}, nil
}

func (s *memStore) Check(_ context.Context, _ int, lsn uint64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return lsn <= s.lsn, nil
}

type memImage struct {
	LSN uint64
	KV  map[string]string
}

func (s *memStore) Snapshot(ctx context.Context, _ int, w io.Writer) (uint64, error) {
	s.mu.Lock()
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	s.mu.Lock()
	img := memImage{LSN: s.lsn, KV: maps.Clone(s.kv)}
	s.took = s.lsn
	s.mu.Unlock()
	return img.LSN, json.NewEncoder(w).Encode(img)
}

func (s *memStore) Restore(_ context.Context, _ int, r io.Reader) (uint64, error) {
	var img memImage
	if err := json.NewDecoder(r).Decode(&img); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv, s.lsn = img.KV, img.LSN
	return img.LSN, nil
}

func (s *memStore) Digest() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(s.kv)) {
		fmt.Fprintf(h, "%s=%s;", k, s.kv[k])
	}
	return fmt.Sprintf("keys=%d %x", len(s.kv), h.Sum(nil)[:6])
}

// memNet connects in-process runtimes: Replicate hands the batch to the
// target runtime, and a snapshot stream is buffered (chunks cloned, as a
// real stream serialises them) and handed to the target's InstallSnapshot
// when the sender closes it.
type memNet struct {
	mu      sync.Mutex
	rts     map[string]*Runtime
	blocked map[[2]string]bool // (from, to) links that drop everything
	chunks  int                // snapshot chunks sent
	maxLen  int                // largest chunk's data
	acks    []*pb.SnapshotAck
}

func (n *memNet) rt(node string) *Runtime {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rts[node]
}

func (n *memNet) Replicate(_ context.Context, node, _ string, b *pb.ReplicaBatch) error {
	rt := n.rt(node)
	n.mu.Lock()
	cut := n.blocked[[2]string{b.From, node}]
	n.mu.Unlock()
	if rt == nil || cut {
		return errors.New("node down")
	}
	rt.Replicate(b)
	return nil
}

func (*memNet) Forward(context.Context, string, string, *pb.CallRequest) (*pb.CallResponse, error) {
	return nil, errors.New("no forwarding in this test")
}

func (n *memNet) OpenSnapshot(ctx context.Context, node, _ string) (SnapshotStream, error) {
	rt := n.rt(node)
	if rt == nil {
		return nil, errors.New("node down")
	}
	return &memStream{ctx: ctx, net: n, rt: rt}, nil
}

type memStream struct {
	ctx    context.Context
	net    *memNet
	rt     *Runtime
	chunks []*pb.SnapshotChunk
}

func (s *memStream) Send(c *pb.SnapshotChunk) error {
	s.chunks = append(s.chunks, proto.Clone(c).(*pb.SnapshotChunk))
	s.net.mu.Lock()
	s.net.chunks++
	s.net.maxLen = max(s.net.maxLen, len(c.Data))
	s.net.mu.Unlock()
	return nil
}

func (s *memStream) CloseAndRecv() (*pb.SnapshotAck, error) {
	i := 0
	ack, err := s.rt.InstallSnapshot(s.ctx, func() (*pb.SnapshotChunk, error) {
		if i == len(s.chunks) {
			return nil, io.EOF
		}
		i++
		return s.chunks[i-1], nil
	})
	if err == nil {
		s.net.mu.Lock()
		s.net.acks = append(s.net.acks, ack)
		s.net.mu.Unlock()
	}
	return ack, err
}

// tlog writes a runtime's log to the test's.
type tlog struct{ t *testing.T }

func (l tlog) Write(b []byte) (int, error) { l.t.Log(string(bytes.TrimSpace(b))); return len(b), nil }

// memCluster is three nodes a, b, c (priorities 3, 2, 1) replicating
// partition 0 of a service at level 2 over memNet, on one manual clock.
// By default the service is kv on a memStore.
type memCluster struct {
	t      *testing.T
	ids    []string // every node, running or not
	clk    *clock.Manual
	net    *memNet
	dirs   map[string]string
	stores map[string]TestStore
	// newStore makes a node's empty store; method and body make write i
	// of about size bytes; client, if set, gives writes that identity.
	newStore func() TestStore
	method   string
	body     func(i, size int) []byte
	client   string
	// slow: a snapshot is held on purpose; advancing does not wait for it.
	slow bool
	// tweak, per node, adjusts its runtime's config.
	tweak map[string]func(*Config)
}

func newMemCluster(t *testing.T) *memCluster {
	return newMemClusterOf(t, func() TestStore { return newMemStore() }, "put", func(i, size int) []byte {
		return fmt.Appendf(nil, "k%04d=%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, size))
	})
}

func newMemClusterOf(t *testing.T, newStore func() TestStore, method string, body func(i, size int) []byte) *memCluster {
	return newMemClusterTweaked(t, newStore, method, body, nil)
}

func newMemClusterTweaked(t *testing.T, newStore func() TestStore, method string, body func(i, size int) []byte, tweak map[string]func(*Config)) *memCluster {
	c := &memCluster{t: t, clk: clock.NewManual(t0), net: &memNet{rts: map[string]*Runtime{}, blocked: map[[2]string]bool{}}, dirs: map[string]string{},
		stores: map[string]TestStore{}, newStore: newStore, method: method, body: body, tweak: tweak}
	for _, id := range []string{"a", "b", "c"} {
		c.addNode(id)
	}
	return c
}

// addNode starts a node id that hosts kv partition 0 (on standby unless
// it is a, b or c).
func (c *memCluster) addNode(id string) {
	c.ids = append(c.ids, id)
	c.dirs[id] = c.t.TempDir()
	c.stores[id] = c.newStore()
	c.start(id)
}

// wipe stops id and starts it again with an empty data directory and
// store.
func (c *memCluster) wipe(id string) {
	c.stop(id)
	c.dirs[id], c.stores[id] = c.t.TempDir(), c.newStore()
	c.start(id)
}

// start runs id's runtime over its data dir and store.
func (c *memCluster) start(id string) {
	c.t.Helper()
	if _, err := c.tryStart(id); err != nil {
		c.t.Fatal(err)
	}
}

// tryStart is start that returns the runtime, or the error of its Start.
func (c *memCluster) tryStart(id string) (*Runtime, error) {
	t := c.t
	t.Helper()
	cfg := Config{Self: id, DataDir: c.dirs[id], Directory: &fakeDir{hosts: []string{"a", "b", "c"}}, Sender: c.net, Clock: c.clk,
		Logger: slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", id)}
	if f := c.tweak[id]; f != nil {
		f(&cfg)
	}
	rt := New(cfg)
	rep := &service.Replication{Level: 2, Replicas: map[int][]service.ReplicaSpec{0: {{Node: "a", Priority: 3}, {Node: "b", Priority: 2}, {Node: "c", Priority: 1}}}}
	st := c.stores[id]
	if err := rt.Register(Partition{Service: "kv", Partition: 0, Replication: rep, Check: st.Check, Executor: st, Snapshots: st}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		return rt, err
	}
	t.Cleanup(func() {
		if c.net.rt(id) == rt {
			rt.Stop()
		}
	})
	c.net.mu.Lock()
	c.net.rts[id] = rt
	c.net.mu.Unlock()
	return rt, nil
}

// stop stops id's runtime (a crash, as far as the others can tell).
func (c *memCluster) stop(id string) {
	rt := c.net.rt(id)
	c.net.mu.Lock()
	delete(c.net.rts, id)
	c.net.mu.Unlock()
	rt.Stop()
}

// part is id's replica of kv partition 0 (nil: not hosted there).
func (c *memCluster) part(id string) *part { return c.net.rt(id).lookup("kv", 0) }

// advance moves the clock by d in ticks; at each step every running loop
// handles it and every message sent meanwhile is delivered and handled
// before the clock moves on (the senders are goroutines: without this,
// answers would arrive whole leases late by the manual clock).
func (c *memCluster) advance(d time.Duration) {
	for ; d > 0; d -= tickEvery {
		c.clk.Advance(min(d, tickEvery))
		for range 1000 {
			c.settleAll()
			if c.quiet() {
				break
			}
			time.Sleep(50 * time.Microsecond) // (real time: let the senders run)
		}
	}
}

// advanceUntil advances the clock a tick at a time until cond holds, at
// most limit, and reports whether it did. advance settles the partition
// loops, not the goroutines beside them (a failed store's reopening, the
// disk watchdog), which on a loaded machine may run only ticks later.
func (c *memCluster) advanceUntil(limit time.Duration, cond func() bool) bool {
	for i, d := 0, time.Duration(0); !cond(); i, d = i+1, d+tickEvery {
		if d >= limit {
			return false
		}
		c.advance(tickEvery)
		// Real time, to let them run: more of it once the first ticks
		// were not enough (a machine busy with other tests, the race
		// detector), up to about 4 s over a 5 s limit.
		pause := time.Millisecond
		if i >= 100 {
			pause = 10 * time.Millisecond
		}
		time.Sleep(pause)
	}
	return true
}

func (c *memCluster) settleAll() {
	for _, id := range c.ids {
		if c.net.rt(id) == nil {
			continue
		}
		if p := c.part(id); p != nil {
			// (A loop that ends meanwhile, its replica removed, is done.)
			done := make(chan struct{})
			for _, op := range []func(time.Time){func(time.Time) {}, func(time.Time) { close(done) }} {
				select {
				case p.ops <- op:
				case <-p.done:
				case <-time.After(5 * time.Second):
					c.t.Fatal("partition loop not taking operations")
				}
			}
			select {
			case <-done:
			case <-p.done:
			case <-time.After(5 * time.Second):
				c.t.Fatal("partition loop stuck")
			}
		}
	}
}

// quiet reports whether no replication message is queued, in flight or
// in an inbox on any running node.
func (c *memCluster) quiet() bool {
	for _, id := range c.ids {
		rt := c.net.rt(id)
		if rt == nil {
			continue
		}
		if p := c.part(id); p != nil && (len(p.inbox) > 0 || !c.slow && p.snapBusy.Load() > 0) {
			return false
		}
		rt.mu.Lock()
		lanes := slices.Collect(maps.Values(rt.peers))
		rt.mu.Unlock()
		for _, l := range lanes {
			for _, pq := range []*peerQueue{l.ctrl, l.bulk} {
				pq.mu.Lock()
				busy := len(pq.q) > 0 || pq.inflight != nil
				pq.mu.Unlock()
				if busy {
					return false
				}
			}
		}
	}
	return true
}

func (c *memCluster) primary() string {
	for _, id := range c.ids {
		if c.net.rt(id) != nil && c.part(id) != nil && c.part(id).status.Load().Role == replica.Primary {
			return id
		}
	}
	return ""
}

// write sends n writes of size bytes to the primary, one at a time,
// advancing the clock while each is in flight.
func (c *memCluster) write(from, n, size int) {
	c.t.Helper()
	for i := from; i < from+n; i++ {
		if c.primary() == "" {
			for _, id := range []string{"a", "b", "c"} {
				if c.net.rt(id) != nil {
					c.t.Logf("%s: %+v", id, *c.part(id).status.Load())
				}
			}
			c.t.Fatalf("write %d: no primary", i)
		}
		p := c.part(c.primary())
		done := make(chan error, 1)
		go func() {
			in := &pb.CallRequest{Method: c.method, Body: c.body(i, size)}
			if c.client != "" {
				in.ClientId, in.Seq = c.client, uint64(i+1)
			}
			_, err := p.write(context.Background(), in)
			done <- err
		}()
		for end := time.Now().Add(10 * time.Second); ; {
			select {
			case err := <-done:
				if err != nil {
					c.t.Fatalf("write %d: %v", i, err)
				}
			default:
				if time.Now().After(end) {
					c.t.Fatalf("write %d not answered", i)
				}
				c.advance(tickEvery)
				continue
			}
			break
		}
	}
}

// onLoop runs f on id's partition loop.
func (c *memCluster) onLoop(id string, f func(p *part)) {
	p := c.part(id)
	done := make(chan struct{})
	p.ops <- func(time.Time) { f(p); close(done) }
	<-done
}

// TestWipedReplicaIsRestoredBySnapshotOnNodes: node c loses its data
// directory and its service's state after the primary truncated the log
// it would need. The primary's node streams a snapshot of its service
// (several chunks, none over snapshotChunk), c restores it, installs it
// and catches up from the log after it; after a restart c resumes from
// the installed base without another snapshot.
func TestWipedReplicaIsRestoredBySnapshotOnNodes(t *testing.T) {
	c := newMemCluster(t)
	c.advance(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	c.write(0, 30, 30<<10) // ~900 KiB of state
	c.advance(500 * time.Millisecond)
	var first replica.LSN
	c.onLoop("a", func(p *part) { first = p.log.First() })
	if first <= 1 {
		t.Fatalf("primary's log starts at %d: not truncated", first)
	}
	c.wipe("c")
	c.advance(2 * time.Second)
	c.write(30, 5, 100)
	c.advance(time.Second)
	if got, want := c.stores["c"].Digest(), c.stores["a"].Digest(); got != want {
		for _, id := range []string{"a", "b", "c"} {
			t.Logf("%s: %+v", id, *c.part(id).status.Load())
		}
		t.Fatalf("wiped c: %s, primary a: %s", got, want)
	}
	if st := c.part("c").status.Load(); st.Phase != replica.PhaseServing || st.Diverged {
		t.Fatalf("c after the snapshot: %+v", st)
	}
	c.net.mu.Lock()
	chunks, maxLen, acks := c.net.chunks, c.net.maxLen, slices.Clone(c.net.acks)
	c.net.mu.Unlock()
	if len(acks) == 0 || !acks[len(acks)-1].Installed || chunks < 4 || maxLen > snapshotChunk {
		t.Fatalf("snapshot streams: acks %v, %d chunks, largest %d bytes", acks, chunks, maxLen)
	}
	// Restart c: the wal holds the snapshot's base, so it needs no other.
	c.stop("c")
	c.start("c")
	c.advance(time.Second)
	c.write(35, 5, 100)
	c.advance(time.Second)
	if got, want := c.stores["c"].Digest(), c.stores["a"].Digest(); got != want {
		t.Fatalf("c after a restart: %s, primary a: %s", got, want)
	}
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	if len(c.net.acks) != len(acks) {
		t.Fatalf("another snapshot after the restart: %v", c.net.acks)
	}
}

// A follower's request for a snapshot survives the wire (without the flag
// the primary took it for a stale reject and never sent one).
func TestSnapshotRequestCrossesTheWire(t *testing.T) {
	m := replica.Message{Type: replica.MsgAppendResp, From: "c", To: "a", Epoch: 2, Reject: true, Snapshot: true, LSN: 9, Hint: 4}
	pm := toPBMessage(partKey{"kv", 0}, m)
	b, err := proto.Marshal(pm)
	if err != nil {
		t.Fatal(err)
	}
	var back pb.ReplicaMessage
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := fromPBMessage(&back); !got.Snapshot || !got.Reject || got.LSN != 9 || got.Hint != 4 {
		t.Fatalf("after the wire: %+v", got)
	}
}

// cut blocks (or with on false, heals) every link between id and the
// others.
func (c *memCluster) cut(id string, on bool) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	for _, o := range []string{"a", "b", "c"} {
		if o != id {
			c.net.blocked[[2]string{id, o}], c.net.blocked[[2]string{o, id}] = on, on
		}
	}
}

// TestDivergedReplicaIsRepairedBySnapshotOnNodes: c is cut off while a
// and b commit writes; a and b stop, and the operator forces c to be
// primary (the writes only a and b had are lost, as promote --force
// warns). When b returns its log differs from c's below its commit point:
// it reports Diverged, asks for a snapshot, restores c's state, and
// serves again with the same data as c.
func TestDivergedReplicaIsRepairedBySnapshotOnNodes(t *testing.T) {
	c := newMemCluster(t)
	c.advance(time.Second)
	c.write(0, 3, 100)
	c.advance(200 * time.Millisecond)
	c.cut("c", true)
	c.write(3, 5, 100) // a and b only: c left the live set after AckTimeout
	c.advance(200 * time.Millisecond)
	c.stop("a")
	c.stop("b")
	c.cut("c", false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.net.rt("c").Promote(ctx, "kv", 0, true); err != nil {
		t.Fatal(err)
	}
	c.advance(100 * time.Millisecond)
	if c.primary() != "c" {
		t.Fatalf("primary %q after the forced promote, want c", c.primary())
	}
	c.start("b")
	c.advance(3 * time.Second)
	c.write(100, 3, 100)
	c.advance(time.Second)
	st := c.part("b").status.Load()
	if st.Diverged || st.Phase != replica.PhaseServing {
		t.Fatalf("b after the forced promote: %+v, want repaired", *st)
	}
	if got, want := c.stores["b"].Digest(), c.stores["c"].Digest(); got != want {
		t.Fatalf("b: %s, primary c: %s", got, want)
	}
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	if len(c.net.acks) == 0 {
		t.Fatal("no snapshot was installed")
	}
}

// TestWritesGoOnWhileASlowSnapshotIsTaken: the primary's service takes
// its time over the image a wiped replica needs; writes are executed and
// answered meanwhile (the image is taken off the partition loop). The
// image then reflects writes after the point the snapshot began, and the
// dedup table sent with it is the table at the image's LSN: the restored
// replica remembers the same write identities as the primary.
func TestWritesGoOnWhileASlowSnapshotIsTaken(t *testing.T) {
	c := newMemCluster(t)
	c.client = "w"
	c.advance(time.Second)
	c.write(0, 30, 30<<10)
	c.advance(500 * time.Millisecond)
	a := c.stores["a"].(*memStore)
	hold := make(chan struct{})
	a.mu.Lock()
	a.hold = hold
	a.mu.Unlock()
	c.slow = true
	c.wipe("c")
	var from replica.LSN
	for i := 0; from == 0; i++ {
		if i == 500 {
			t.Fatal("the primary never began a snapshot")
		}
		c.advance(tickEvery)
		c.onLoop("a", func(p *part) {
			if len(p.dumps) > 0 {
				from = p.dumps[0].from
			}
		})
	}
	c.write(30, 10, 100) // fails if the loop waits for the image
	close(hold)
	c.slow = false
	c.advance(2 * time.Second)
	c.write(40, 5, 100)
	c.advance(time.Second)
	a.mu.Lock()
	took := a.took
	a.mu.Unlock()
	if replica.LSN(took) <= from {
		t.Fatalf("the image covers LSN %d, not beyond %d where the snapshot began", took, from)
	}
	if got, want := c.stores["c"].Digest(), a.Digest(); got != want {
		t.Fatalf("wiped c: %s, primary a: %s", got, want)
	}
	if st := c.part("c").status.Load(); st.Phase != replica.PhaseServing || st.Diverged {
		t.Fatalf("c after the snapshot: %+v", st)
	}
	ids := func(id string) (out []string) {
		c.onLoop(id, func(p *part) {
			for _, r := range p.dedup.Records() {
				out = append(out, fmt.Sprintf("%s@%d", r.WriteID, r.LSN))
			}
		})
		return out
	}
	if got, want := ids("c"), ids("a"); !slices.Equal(got, want) || len(want) != 45 {
		t.Fatalf("c remembers %d identities, the primary %d:\nc: %v\na: %v", len(got), len(want), got, want)
	}
}
