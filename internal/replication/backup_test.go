package replication

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/backup"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// takeBackup runs Backup at id's runtime while the clock advances,
// writing the snapshot to w.
func (c *memCluster) takeBackup(id string, w *bytes.Buffer) (lsn uint64, err error) {
	done := make(chan error, 1)
	go func() {
		done <- c.net.rt(id).Backup(context.Background(), "kv", 0, func(l, _ uint64) error { lsn = l; return nil }, w)
	}()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		select {
		case err := <-done:
			return lsn, err
		default:
			c.advance(tickEvery)
		}
	}
	c.t.Fatal("Backup did not return")
	return 0, nil
}

// TestBackupSeedsANewCluster: a backup taken at the primary of a
// partition with identified writes, written to a backup file, seeds three
// new nodes: each starts at the backup's LSN with the primary's state and
// exactly-once table, they elect a primary and take writes; the seed file
// is gone after the start, and writes after the backup are not in it. A
// follower refuses to take a backup; a node whose replica already holds
// writes refuses to be seeded.
func TestBackupSeedsANewCluster(t *testing.T) {
	c := newMemCluster(t)
	c.client = "cl"
	c.advance(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	c.write(0, 20, 100)
	c.advance(200 * time.Millisecond)

	var buf bytes.Buffer
	if _, err := c.takeBackup("b", &buf); !errors.Is(err, nerr.ErrNoPrimary) || buf.Len() != 0 {
		t.Fatalf("backup at follower b: %v, %d bytes; want ErrNoPrimary and nothing", err, buf.Len())
	}
	lsn, err := c.takeBackup("a", &buf)
	if err != nil {
		t.Fatal(err)
	}
	want := c.stores["a"].Digest()
	var recs int
	c.onLoop("a", func(p *part) { recs = len(p.dedup.Records()) })
	if st := c.part("a").status.Load(); lsn != uint64(st.Applied) || recs != 20 {
		t.Fatalf("backup at LSN %d, primary executed %d, %d exactly-once records; want its LSN and 20", lsn, st.Applied, recs)
	}
	c.write(20, 5, 100) // after the backup

	dir := t.TempDir()
	s, err := backup.NewSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Write(buf.Bytes())
	file := filepath.Join(dir, "kv.nbk")
	if err := backup.Write(file, backup.Header{Service: "kv", Partitions: []backup.Part{{Partition: 0, LSN: lsn}}}, []*backup.Spool{s}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}

	// Three new nodes seeded from the file.
	c2 := &memCluster{t: t, clk: clock.NewManual(t0), net: &memNet{rts: map[string]*Runtime{}, blocked: map[[2]string]bool{}}, dirs: map[string]string{},
		stores: map[string]TestStore{}, newStore: c.newStore, method: c.method, body: c.body, client: "cl"}
	for _, id := range []string{"a", "b", "c"} {
		c2.ids = append(c2.ids, id)
		c2.dirs[id], c2.stores[id] = t.TempDir(), c2.newStore()
		path := RestoreFile(c2.dirs[id], "kv")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c2.start(id)
		if _, err := os.Stat(path); err == nil {
			t.Errorf("%s: the seed file is still there after the start", id)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		if got := c2.stores[id].Digest(); got != want {
			t.Errorf("seeded %s: %s, want the primary's at the backup: %s", id, got, want)
		}
		var n int
		c2.onLoop(id, func(p *part) { n = len(p.dedup.Records()) })
		if st := c2.part(id).status.Load(); uint64(st.Applied) != lsn || n != 20 {
			t.Errorf("seeded %s: executed %d with %d exactly-once records, want %d and 20", id, st.Applied, n, lsn)
		}
	}
	c2.advance(time.Second)
	if c2.primary() == "" {
		t.Fatal("no primary elected among the seeded replicas")
	}
	// A retry of a write the backup holds is answered from its record.
	p := c2.part(c2.primary())
	last := p.status.Load().Last
	res, err := p.write(context.Background(), &pb.CallRequest{Method: c.method, Body: c.body(3, 100), ClientId: "cl", Seq: 4})
	if err != nil || p.status.Load().Last != last {
		t.Errorf("retry of write 3 after the restore: %v %+v; log last %d, was %d: want it answered from its record, not written again",
			err, res, p.status.Load().Last, last)
	}
	c2.write(30, 3, 100)
	c2.advance(500 * time.Millisecond)
	if a, b := c2.stores["a"].Digest(), c2.stores["c"].Digest(); a != b || a == want {
		t.Errorf("after new writes: a %s, c %s", a, b)
	}

	// A replica that holds writes is not seeded over.
	c.stop("c")
	if err := os.WriteFile(RestoreFile(c.dirs["c"], "kv"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.tryStart("c"); err == nil || !strings.Contains(err.Error(), "already holds writes") {
		t.Errorf("seeding a replica with writes: %v", err)
	}
}
