package wal

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/neptune-cluster/neptune/internal/replica"
)

func entries(from, to replica.LSN, epoch replica.Epoch) []replica.Entry {
	var es []replica.Entry
	for l := from; l <= to; l++ {
		es = append(es, replica.Entry{Epoch: epoch, LSN: l, Method: "put", Origin: "a", ReqID: uint64(l),
			Body: []byte(fmt.Sprintf("body-%d-%d", epoch, l))})
	}
	return es
}

func lsns(es []replica.Entry) []replica.LSN {
	var ls []replica.LSN
	for _, e := range es {
		ls = append(ls, e.LSN)
	}
	return ls
}

func TestSaveReadReplace(t *testing.T) {
	l, err := open("db", vfs.NewMem(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Save(&replica.HardState{Epoch: 1, Vote: "a"}, entries(1, 5, 1), true); err != nil {
		t.Fatal(err)
	}
	// A new primary's log replaces the uncommitted suffix from LSN 4.
	if err := l.Save(nil, entries(4, 6, 2), true); err != nil {
		t.Fatal(err)
	}
	got, err := l.Entries(3, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := append(entries(3, 3, 1), entries(4, 6, 2)...)
	if !slices.EqualFunc(got, want, entryEqual) {
		t.Fatalf("Entries(3) = %+v, want %+v", got, want)
	}
	if l.First() != 1 || l.Last() != 6 {
		t.Fatalf("bounds [%d, %d], want [1, 6]", l.First(), l.Last())
	}
	if err := l.Save(nil, entries(9, 9, 2), true); err == nil {
		t.Fatal("a gap in the log was accepted")
	}
}

func entryEqual(a, b replica.Entry) bool {
	return a.Epoch == b.Epoch && a.LSN == b.LSN && a.Method == b.Method && a.Origin == b.Origin &&
		a.ReqID == b.ReqID && a.Seq == b.Seq && string(a.Body) == string(b.Body)
}

// A synced Save survives a crash; an unsynced one may not, and the log
// stays a dense prefix either way.
func TestCrashKeepsSyncedAppends(t *testing.T) {
	fs := vfs.NewStrictMem()
	l, err := open("", fs, Options{}) // the root: a new subdirectory's entry would itself need a sync
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(&replica.HardState{Epoch: 3, Commit: 4, Vote: "b"}, entries(1, 4, 3), true); err != nil {
		t.Fatal(err)
	}
	if err := l.SetApplied(2, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Save(nil, entries(5, 8, 3), false); err != nil {
		t.Fatal(err)
	}
	fs.SetIgnoreSyncs(true) // the crash: nothing after this point reaches disk
	l.Close()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)

	l, rs := reopen(t, fs, "")
	if rs.HardState != (replica.HardState{Epoch: 3, Commit: 4, Vote: "b"}) || rs.Applied != 2 {
		t.Fatalf("restored %+v applied %d", rs.HardState, rs.Applied)
	}
	if got := lsns(rs.Entries); !slices.Equal(got, []replica.LSN{1, 2, 3, 4}) {
		t.Fatalf("restored LSNs %v, want the synced 1..4", got)
	}
	// The restored state restarts a replica in phase 1 over (2, 4].
	r, err := replica.New(replica.Config{ID: "b", Level: replica.Level2, Replicas: []replica.Peer{{ID: "b"}}}, rs)
	if err != nil {
		t.Fatal(err)
	}
	if rd := r.Ready(); !slices.Equal(lsns(rd.Check), []replica.LSN{3, 4}) {
		t.Fatalf("CHECK range %v, want [3 4]", lsns(rd.Check))
	}
}

// logWith opens an in-memory log holding entries 1..10 of epoch 1, the
// first applied of them executed.
func logWith(t *testing.T, fs vfs.FS, applied replica.LSN) *Log {
	t.Helper()
	l, err := open("db", fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(nil, entries(1, 10, 1), true); err != nil {
		t.Fatal(err)
	}
	if err := l.SetApplied(applied, true); err != nil {
		t.Fatal(err)
	}
	return l
}

// reopen opens the log in dir of fs again (its last holder closed it) and
// restores from it; the log is closed when the test ends.
func reopen(t *testing.T, fs vfs.FS, dir string) (*Log, replica.Restore) {
	t.Helper()
	l, err := open(dir, fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rs, err := l.Restore()
	if err != nil {
		t.Fatal(err)
	}
	return l, rs
}

func TestTruncateKeepsUnexecutedAndSurvivesReopen(t *testing.T) {
	fs := vfs.NewMem()
	l := logWith(t, fs, 6)
	if err := l.Truncate(8); err != nil { // only up to the executed marker
		t.Fatal(err)
	}
	if l.First() != 7 {
		t.Fatalf("first %d after truncation, want 7", l.First())
	}
	l.Close()
	l, rs := reopen(t, fs, "db")
	if got := lsns(rs.Entries); !slices.Equal(got, []replica.LSN{7, 8, 9, 10}) || l.First() != 7 || l.Last() != 10 {
		t.Fatalf("after reopen LSNs %v bounds [%d,%d]", got, l.First(), l.Last())
	}
	if err := l.Save(nil, entries(11, 11, 1), true); err != nil || l.Last() != 11 {
		t.Fatalf("append after reopen: %v, last %d", err, l.Last())
	}
}

// TestTruncationStoresLevel1Base: the version vector of a level-1
// truncation is stored with it and comes back in Restore.
func TestTruncationStoresLevel1Base(t *testing.T) {
	fs := vfs.NewMem()
	l := logWith(t, fs, 10)
	base := map[replica.ID]uint64{"a": 4, "bb": 7}
	if err := l.Persist(&replica.Ready{Truncate: 6, TruncateBase: base}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, rs := reopen(t, fs, "db")
	if !maps.Equal(rs.Base, base) || l.First() != 7 {
		t.Fatalf("restored base %v first %d, want %v 7", rs.Base, l.First(), base)
	}
	if _, err := decodeBase(encodeBase(base)[:2]); err == nil {
		t.Fatal("truncated base decoded")
	}
}

func TestDecodeCorrupt(t *testing.T) {
	b := encodeEntry(entries(1, 1, 1)[0])
	if _, err := decodeEntry(b[:3]); err == nil {
		t.Fatal("truncated record decoded")
	}
	e, err := decodeEntry(b)
	if err != nil || !entryEqual(e, entries(1, 1, 1)[0]) {
		t.Fatalf("round trip: %+v %v", e, err)
	}
}

// A one-replica partition driven through the log: writes commit, the node
// crashes after executing one write without recording it, and the restart
// CHECKs instead of executing it again.
func TestReplicaOverLog(t *testing.T) {
	fs := vfs.NewMem()
	l, err := open("db", fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := replica.Config{ID: "a", Level: replica.Level2, Replicas: []replica.Peer{{ID: "a"}}}
	r, err := replica.New(cfg, replica.Restore{})
	if err != nil {
		t.Fatal(err)
	}
	executed := map[replica.LSN]int{}
	now := t0()
	drive := func() {
		for {
			rd := r.Ready()
			if rd.Empty() {
				r.Advance(rd)
				return
			}
			if err := l.Persist(&rd); err != nil {
				t.Fatal(err)
			}
			for _, e := range rd.Check {
				r.Checked(e.LSN, executed[e.LSN] > 0)
			}
			for _, e := range rd.Apply {
				executed[e.LSN]++
			}
			r.Advance(rd)
		}
	}
	r.Tick(now)
	now = now.Add(time.Second) // past ElectionTimeout: it elects itself (MinLive is 1)
	r.Tick(now)
	drive()
	for i := range 3 {
		r.Propose(now, replica.Write{ReqID: uint64(i + 1), Method: "put"})
		drive()
	}
	if s := r.Status(); s.Role != replica.Primary || s.Commit != 4 { // the no-op + 3 writes
		t.Fatalf("status %+v, want primary with commit 4", s)
	}
	if err := l.SetApplied(2, true); err != nil { // executed 3 and 4 but recorded only 2
		t.Fatal(err)
	}
	l.Close()

	l, rs := reopen(t, fs, "db")
	if r, err = replica.New(cfg, rs); err != nil {
		t.Fatal(err)
	}
	drive()
	for lsn, n := range executed {
		if n != 1 {
			t.Fatalf("LSN %d executed %d times", lsn, n)
		}
	}
	r.Tick(now)
	now = now.Add(time.Second)
	r.Tick(now)
	drive()
	r.Propose(now, replica.Write{ReqID: 9, Method: "put"})
	drive()
	if executed[5] != 1 {
		t.Fatalf("restarted replica did not resume: %v", executed)
	}
}

func t0() time.Time { return time.Unix(1000, 0) }

// A replica truncates after nearly every append, so the log sees thousands
// of truncations between memtable flushes. Each must delete only what it
// newly drops: pebble fragments n overlapping range tombstones (all starting
// at LSN 0) into O(n²) keys on every read of the memtable, which grew a
// node's heap by gigabytes (docs/experiments/replica.md). Disjoint
// tombstones fragment into O(n), so one read allocates little.
func TestTruncateTombstonesDoNotOverlap(t *testing.T) {
	l, err := open("db", vfs.NewMem(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 2000
	for i := replica.LSN(1); i <= n; i++ {
		if err := l.Save(nil, entries(i, i, 1), false); err != nil {
			t.Fatal(err)
		}
		if err := l.SetApplied(i, false); err != nil {
			t.Fatal(err)
		}
		if err := l.Truncate(i); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	es, err := l.Entries(1, 10) // fragments the memtable's tombstones
	runtime.ReadMemStats(&after)
	if err != nil || len(es) != 0 {
		t.Fatalf("Entries(1) after truncating everything = %d entries, %v", len(es), err)
	}
	// Overlapping tombstones make ~n²/2 = 2M fragment keys (> 50 MiB).
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Fatalf("one read after %d truncations allocated %d MiB, want < 8 MiB", n, got>>20)
	}
	if l.First() != n+1 {
		t.Fatalf("first %d, want %d", l.First(), n+1)
	}
}

// TestInstallResetsToTheSnapshotBase: after Install the log is empty and
// starts after the snapshot's LSN, the executed marker is there (lower
// than before: a diverged replica's), the dedup table is the snapshot's,
// and appends and a reopen continue from the base.
func TestInstallResetsToTheSnapshotBase(t *testing.T) {
	fs := vfs.NewMem()
	l, err := open("db", fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(&replica.HardState{Epoch: 1, Commit: 9}, entries(1, 9, 1), true); err != nil {
		t.Fatal(err)
	}
	if err := l.SetAppliedDedup(9, []replica.DedupRecord{{WriteID: "old", LSN: 3}}, nil, 5, true); err != nil {
		t.Fatal(err)
	}
	rd := replica.Ready{Installed: &replica.Installed{LSN: 6, Epoch: 2}, HardState: &replica.HardState{Epoch: 2, Commit: 6},
		Entries: entries(7, 8, 2)}
	if err := l.PersistInstalled(&rd, []replica.DedupRecord{{WriteID: "new", LSN: 5}}, 7); err != nil {
		t.Fatal(err)
	}
	if l.First() != 7 || l.Last() != 8 {
		t.Fatalf("after install: first %d last %d, want 7 8", l.First(), l.Last())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = open("db", fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rs, err := l.Restore()
	if err != nil {
		t.Fatal(err)
	}
	if rs.Applied != 6 || rs.HardState.Commit != 6 || rs.HardState.Epoch != 2 || !slices.Equal(lsns(rs.Entries), []replica.LSN{7, 8}) {
		t.Fatalf("restored %+v entries %v", rs.HardState, lsns(rs.Entries))
	}
	recs, high, err := l.Dedup()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].WriteID != "new" || high != 7 {
		t.Fatalf("dedup after install: %+v high %d", recs, high)
	}
	r, err := replica.New(replica.Config{ID: "a", Level: replica.Level2, Replicas: []replica.Peer{{ID: "a"}, {ID: "b"}}}, rs)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Status(); s.Applied != 6 || s.Last != 8 {
		t.Fatalf("replica over the installed log: %+v", s)
	}
}

// TestReplicaSetSurvivesReopen: the committed replica set a Ready
// carries is stored and comes back in Restore.
func TestReplicaSetSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rs, err := l.Restore(); err != nil || rs.ConfState != nil {
		t.Fatalf("fresh log: %+v, %v", rs.ConfState, err)
	}
	cs := replica.ConfState{LSN: 7, Members: []replica.Peer{{ID: "a", Priority: 2}, {ID: "d", Learner: true}}}
	rd := replica.Ready{ConfState: &cs, HardState: &replica.HardState{Epoch: 1, Commit: 7}, Entries: entries(1, 7, 1)}
	if err := l.Persist(&rd); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rs, err := l.Restore()
	if err != nil || rs.ConfState == nil || rs.ConfState.LSN != 7 || !slices.Equal(rs.ConfState.Members, cs.Members) {
		t.Fatalf("restored %+v, %v", rs.ConfState, err)
	}
}

// entrySize is the exact length of an entry's encoding, whatever the
// widths of its varints: Save encodes entries into space reserved by it.
func TestEntrySizeIsTheEncodedLength(t *testing.T) {
	for _, e := range []replica.Entry{
		{},
		entries(1, 1, 1)[0],
		{Epoch: 1 << 40, LSN: 1<<63 + 5, ReqID: 127, Seq: 128, Method: strings.Repeat("m", 200), Origin: "node-1",
			WriteID: "c/1", Time: -1, Body: make([]byte, 1<<16)},
	} {
		if got, want := entrySize(e), len(encodeEntry(e)); got != want || cap(encodeEntry(e)) != want {
			t.Errorf("entrySize %d, encoding %d bytes (cap %d)", got, want, cap(encodeEntry(e)))
		}
	}
}
