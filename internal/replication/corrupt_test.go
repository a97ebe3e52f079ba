package replication

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/record"

	"github.com/neptune-cluster/neptune/internal/replica/wal"
)

// newestSegment is the newest pebble WAL segment of node id's replica.
func (c *memCluster) newestSegment(id string) string {
	c.t.Helper()
	dir := filepath.Join(c.dirs[id], "kv", "0")
	ents, err := os.ReadDir(dir)
	if err != nil {
		c.t.Fatal(err)
	}
	var logs []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, e.Name())
		}
	}
	if len(logs) == 0 {
		c.t.Fatalf("no WAL segment in %s", dir)
	}
	return filepath.Join(dir, slices.Max(logs))
}

func flipByte(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += len(b)
	}
	b[off] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func kvBody(i, size int) []byte {
	return fmt.Appendf(nil, "k%04d=%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, size))
}

// TestCorruptReplicaRefusesToStartThenIsRebuilt: bytes flipped in the
// middle of a stopped follower's write log. Without rebuild_corrupt its
// start fails, logged at ERROR and counted, with the command that
// repairs it; with it, the directory is quarantined and the replica is
// rebuilt from its peers.
func TestCorruptReplicaRefusesToStartThenIsRebuilt(t *testing.T) {
	logs := &logLines{t: t}
	rebuild := false
	c := newMemClusterTweaked(t, func() TestStore { return newMemStore() }, "put", kvBody, map[string]func(*Config){"c": func(cfg *Config) {
		cfg.Logger = slogTo(logs, "c")
		cfg.RebuildCorrupt = rebuild
	}})
	c.advance(time.Second)
	c.write(0, 40, 1<<10)
	c.advance(500 * time.Millisecond)
	c.stop("c")
	flipByte(t, c.newestSegment("c"), 2000)

	rt, err := c.tryStart("c")
	if err == nil {
		t.Fatal("a replica with a corrupt write log started")
	}
	if !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), RebuildCommand(c.dirs["c"], "kv", 0)) {
		t.Fatalf("start: %v, want ErrCorrupt naming the rebuild command", err)
	}
	if got := rt.Corruption(); len(got) != 1 || got[0].Kind != "wal" || got[0].Count != 1 {
		t.Fatalf("corruption counted %+v, want kv/0 wal 1", got)
	}
	if !logs.has("level=ERROR msg=\"write log corrupt") {
		t.Fatal("corruption not logged at ERROR")
	}

	rebuild = true
	c.start("c")
	if !logs.has("quarantined") {
		t.Fatal("no line about the quarantine")
	}
	q, err := os.ReadDir(filepath.Join(c.dirs["c"], QuarantineDir, "kv"))
	if err != nil || len(q) != 1 {
		t.Fatalf("quarantine dir: %v, %v", q, err)
	}
	c.write(40, 5, 1<<10)
	c.advance(2 * time.Second)
	c.converged()
}

// lastRecord is where the last record of a WAL segment starts.
func lastRecord(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	num, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".log"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	r := record.NewReader(bytes.NewReader(b), pebble.FileNum(num))
	last := int64(-1)
	for {
		off := r.Offset()
		rec, err := r.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if err != nil {
			break
		}
		last = off
	}
	if last < 0 {
		t.Fatalf("no record in %s", path)
	}
	return last
}

// TestDamagedEndOfTheLogIsReportedAndRecovered: bytes flipped in the last
// record of a stopped follower's newest WAL segment (what a torn write
// leaves too). pebble cuts the log there; the node starts, logs the cut
// at ERROR, counts it, and gets what it lost from the primary.
func TestDamagedEndOfTheLogIsReportedAndRecovered(t *testing.T) {
	logs := &logLines{t: t}
	c := newMemClusterTweaked(t, func() TestStore { return newMemStore() }, "put", kvBody, map[string]func(*Config){"c": func(cfg *Config) {
		cfg.Logger = slogTo(logs, "c")
	}})
	c.advance(time.Second)
	c.write(0, 40, 1<<10)
	c.advance(500 * time.Millisecond)
	c.stop("c")
	seg := c.newestSegment("c")
	flipByte(t, seg, int(lastRecord(t, seg))+12) // in its first chunk's payload
	rt, err := c.tryStart("c")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if !logs.has("write log damaged at the end of its newest segment") {
		t.Fatal("the cut was not logged")
	}
	if got := rt.Corruption(); len(got) != 1 || got[0].Kind != "wal" {
		t.Fatalf("corruption counted %+v, want kv/0 wal", got)
	}
	c.write(40, 5, 1<<10)
	c.advance(2 * time.Second)
	c.converged()
}

// TestDamagedSnapshotFileIsNotRestored: a byte of the snapshot a wiped
// follower received flips on disk before it is restored. The follower
// refuses it (logged at ERROR, counted as kind snapshot) and restores the
// next one the primary sends.
func TestDamagedSnapshotFileIsNotRestored(t *testing.T) {
	logs := &logLines{t: t}
	c := newMemClusterTweaked(t, func() TestStore { return newMemStore() }, "put", kvBody, map[string]func(*Config){"c": func(cfg *Config) {
		cfg.Logger = slogTo(logs, "c")
	}})
	c.advance(time.Second)
	c.write(0, 30, 30<<10)
	c.advance(500 * time.Millisecond)
	damaged := 0
	spooledHook = func(path string) {
		if damaged == 0 {
			damaged++
			flipByte(t, path, 1000)
		}
	}
	t.Cleanup(func() { spooledHook = nil })
	c.wipe("c")
	c.advance(3 * time.Second)
	c.write(30, 5, 100)
	c.advance(time.Second)
	if damaged != 1 || !logs.has("snapshot file corrupt on disk") {
		t.Fatalf("damaged %d snapshot files; refusal logged: %v", damaged, logs.has("snapshot file corrupt on disk"))
	}
	if got := c.net.rt("c").Corruption(); len(got) != 1 || got[0].Kind != "snapshot" {
		t.Fatalf("corruption counted %+v, want kv/0 snapshot", got)
	}
	c.converged()
}
