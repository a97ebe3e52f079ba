package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/testfs"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestDiskGuardHysteresis: full below the reserve, not full again until
// twice the reserve is free.
func TestDiskGuardHysteresis(t *testing.T) {
	g := diskGuard{reserve: 100}
	for _, c := range []struct {
		free          uint64
		full, changed bool
	}{{500, false, false}, {99, true, true}, {150, true, false}, {199, true, false}, {200, false, true}, {100, false, false}, {0, true, true}} {
		if changed := g.observe(c.free); changed != c.changed || g.full != c.full {
			t.Fatalf("free %d: full %v changed %v, want %v %v", c.free, g.full, changed, c.full, c.changed)
		}
	}
}

// logLines collects a runtime's log lines (and still writes them to the
// test's log).
type logLines struct {
	t  *testing.T
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(b)
	l.mu.Unlock()
	l.t.Log(string(bytes.TrimSpace(b)))
	return len(b), nil
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

func slogTo(w *logLines, node string) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", node)
}

// tryWrite sends write i to node id's replica, advancing the clock while
// it is in flight, and returns its outcome.
func (c *memCluster) tryWrite(id string, i, size int) error {
	c.t.Helper()
	p := c.part(id)
	done := make(chan error, 1)
	go func() {
		_, err := p.write(context.Background(), &pb.CallRequest{Method: c.method, Body: c.body(i, size)})
		done <- err
	}()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		select {
		case err := <-done:
			return err
		default:
			c.advance(tickEvery)
		}
	}
	c.t.Fatalf("write %d at %s not answered", i, id)
	return nil
}

// converged fails the test unless every node's store holds the same state.
// converged waits, on the manual clock and for at most 5 s of it, until
// every store matches a's. A replica that reopened catches up over a few
// ticks after its reopening, which runs on its own goroutine in real
// time: on a loaded machine it may come late in an advance.
func (c *memCluster) converged() {
	c.t.Helper()
	for waited := time.Duration(0); ; waited += 100 * time.Millisecond {
		want, differ := c.stores["a"].Digest(), ""
		for _, id := range []string{"b", "c"} {
			if got := c.stores[id].Digest(); got != want {
				differ = fmt.Sprintf("store of %s is %s, a's %s", id, got, want)
			}
		}
		if differ == "" {
			return
		}
		if waited >= 5*time.Second {
			c.t.Fatal(differ)
		}
		c.advance(100 * time.Millisecond)
	}
}

// TestFullDiskPrimaryHandsOverAndResumes runs the primary's data
// directory on a real tmpfs and fills it below the reserve: the node logs
// an error naming the directory and its free space, hands the primary
// role over, refuses writes there with a retryable error that never ran
// them, keeps serving reads, and takes its role back by itself when
// space returns, with every acknowledged write on every replica.
func TestFullDiskPrimaryHandsOverAndResumes(t *testing.T) {
	dir := testfs.Tmpfs(t, 32<<20)
	logs := &logLines{t: t}
	c := newMemClusterTweaked(t, func() TestStore { return newMemStore() }, "put", func(i, size int) []byte {
		return fmt.Appendf(nil, "k%04d=%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, size))
	}, map[string]func(*Config){"a": func(cfg *Config) {
		cfg.DataDir, cfg.DiskReserve = dir, 4<<20
		cfg.Logger = slogTo(logs, "a")
	}})
	c.advance(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	c.write(0, 10, 1<<10)

	filler := testfs.Fill(t, dir, 2<<20)
	c.advance(2 * time.Second) // the watchdog's check, then the handover
	if !logs.has("data directory full") || !logs.has("path="+dir) || !logs.has("free_bytes=") {
		t.Fatal("no error naming the full directory and its free space")
	}
	if p := c.primary(); p == "" || p == "a" {
		t.Fatalf("primary %q with a's disk full, want b or c", p)
	}
	before := c.stores["a"].Digest()
	// a knows the new primary: a write sent there is forwarded, not
	// logged at a. Without a primary known it is refused, never run.
	if err := c.tryWrite("a", 100, 1<<10); err == nil || !errors.Is(err, ErrStorageFull) && !errors.As(err, new(*replica.NotPrimaryError)) {
		t.Fatalf("write at the full node: %v, want a redirect or a refusal", err)
	}
	pa := c.part("a")
	c.advanceUntil(5*time.Second, func() bool { return mayRead(replica.Level2, pa.status.Load(), c.clk.Now(), 0) })
	st := *pa.status.Load()
	if err := pa.refusal(); !errors.Is(err, ErrStorageFull) || !errors.Is(err, nerr.ErrNoPrimary) || !nerr.Retryable(err) {
		t.Fatalf("refusal %v: want ErrStorageFull, ErrNoPrimary, retryable", err)
	}
	if !mayRead(replica.Level2, &st, c.clk.Now(), 0) {
		t.Fatalf("the full node stopped serving reads: %+v", st)
	}
	for i := 10; i < 30; i++ {
		if err := c.tryWrite(c.primary(), i, 1<<10); err != nil {
			t.Fatalf("write %d to the new primary: %v", i, err)
		}
	}
	if got := c.stores["a"].Digest(); got != before {
		t.Fatalf("the full node executed writes: %s, was %s", got, before)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.advance(5 * time.Second)
	if !logs.has("data directory has space again") {
		t.Fatal("no line saying writes resume")
	}
	if c.primary() != "a" {
		t.Fatalf("primary %q once space returned, want a (priority)", c.primary())
	}
	c.write(30, 5, 1<<10)
	c.advance(time.Second)
	c.converged()
}

// TestFullDiskFollowerSurvivesAFailedWrite fills a follower's tmpfs to the
// last byte before the watchdog looks: its next write to the log fails
// with ENOSPC. The node does not panic: the replica stops, is published
// as recovering, the others go on committing, and once space is freed it
// reopens from disk by itself and catches up; nothing acknowledged is lost.
func TestFullDiskFollowerSurvivesAFailedWrite(t *testing.T) {
	dir := testfs.Tmpfs(t, 32<<20)
	logs := &logLines{t: t}
	c := newMemClusterTweaked(t, func() TestStore { return newMemStore() }, "put", func(i, size int) []byte {
		return fmt.Appendf(nil, "k%04d=%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, size))
	}, map[string]func(*Config){"c": func(cfg *Config) {
		cfg.DataDir, cfg.DiskReserve = dir, 1<<20
		cfg.DiskCheckEvery = time.Hour // the watchdog does not see it coming
		cfg.Logger = slogTo(logs, "c")
	}})
	c.advance(time.Second)
	c.write(0, 10, 1<<10)
	filler := testfs.Fill(t, dir, 0)
	c.write(10, 40, 8<<10) // a and b commit without c
	if !logs.has("replica storage failed") || !logs.has("no space left on device") {
		t.Fatal("the follower's failed write was not reported")
	}
	if st := c.part("c").status.Load(); st.Role != replica.Recovering {
		t.Fatalf("failed replica published as %v, want recovering", st.Role)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.advance(5 * time.Second)
	if !logs.has("write log reopened") {
		t.Fatal("the replica did not reopen by itself")
	}
	c.write(50, 5, 1<<10)
	c.advance(time.Second)
	if st := c.part("c").status.Load(); st.Role != replica.Secondary {
		t.Fatalf("reopened replica is %v, want secondary", st.Role)
	}
	c.converged()
}

// failingStore fails the write at one LSN once with service.ErrStorage
// (its storage failed before the write took effect).
type failingStore struct {
	*memStore
	at     uint64
	failed bool
}

func (s *failingStore) Execute(ctx context.Context, req *service.Request) (Result, error) {
	if req.LSN == s.at && !s.failed {
		s.failed = true
		return Result{Err: fmt.Errorf("store: %w: disk full", service.ErrStorage)}, nil
	}
	return s.memStore.Execute(ctx, req)
}

// TestServiceStorageFailureRunsTheWriteAgain: a follower's service fails
// a write with ErrStorage. The write is not recorded as executed with
// that error: the replica stops, reopens and runs it again, and ends with
// the same state as the others.
func TestServiceStorageFailureRunsTheWriteAgain(t *testing.T) {
	logs := &logLines{t: t}
	var failing *failingStore
	c := newMemClusterTweaked(t, func() TestStore { return newMemStore() }, "put", kvBody, map[string]func(*Config){"c": func(cfg *Config) {
		cfg.Logger = slogTo(logs, "c")
	}})
	c.advance(time.Second)
	c.write(0, 5, 100)
	c.stop("c")
	failing = &failingStore{memStore: c.stores["c"].(*memStore), at: 8}
	c.stores["c"] = failing
	c.start("c")
	c.advance(time.Second)
	c.write(5, 10, 100)
	c.advance(3 * time.Second)
	c.advanceUntil(10*time.Second, func() bool { return logs.has("write log reopened") })
	if !failing.failed || !logs.has("replica storage failed") || !logs.has("write log reopened") {
		t.Fatalf("failed %v: the replica did not stop and reopen", failing.failed)
	}
	c.converged()
}

// TestSilentPrimaryOfALiveNodeIsReplaced: the primary's replica of this
// partition stops (its store failed) while its node goes on talking for
// its other partitions, so the failure detector keeps the node alive.
// The secondary must still call an election once the partition's
// primary has been silent for AckTimeout: its higher priority holds
// nobody back (it did, and the partition stayed without a primary).
func TestSilentPrimaryOfALiveNodeIsReplaced(t *testing.T) {
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
	for range 60 { // 600 ms: a's node is heard from, its replica of kv/0 is not
		rt.det.heardFrom("a")
		advance(t, p, clk, tickEvery)
	}
	if !snd.campaigned() {
		t.Fatalf("no election with the primary's replica silent for %v: epoch %d", 600*time.Millisecond, epoch(p))
	}
}
