package wal

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/record"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// buildStore makes a log in dir with a table (the first 100 entries,
// flushed) and a WAL segment holding the rest, 1000-byte bodies.
func buildStore(t *testing.T, dir string) {
	t.Helper()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := replica.LSN(1); i <= 150; i++ {
		e := replica.Entry{Epoch: 1, LSN: i, Method: "put", Body: make([]byte, 1000)}
		if err := l.Save(&replica.HardState{Epoch: 1, Commit: i}, []replica.Entry{e}, true); err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			if err := l.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// file is the one file in dir whose name has prefix and suffix.
func file(t *testing.T, dir, prefix, suffix string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) && strings.HasSuffix(e.Name(), suffix) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatalf("no %s*%s in %s", prefix, suffix, dir)
	}
	return filepath.Join(dir, slices.Max(names))
}

// flip inverts the byte at off in path (off < 0: from the end).
func flip(t *testing.T, path string, off int) {
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

// TestEveryDamagedFileKindIsReported flips bytes in each kind of file a
// write log keeps. Each damage pebble would pass over silently or report
// as something else is an ErrCorrupt at open; a damaged end of the newest
// WAL segment (a torn write looks the same) opens with the damage
// reported.
func TestEveryDamagedFileKindIsReported(t *testing.T) {
	for _, c := range []struct {
		name    string
		damage  func(t *testing.T, dir string)
		tailCut bool
	}{
		{"wal segment, middle", func(t *testing.T, dir string) { flip(t, file(t, dir, "", ".log"), 20<<10) }, false},
		{"wal segment, last record", func(t *testing.T, dir string) {
			path := file(t, dir, "", ".log")
			flip(t, path, int(lastRecordOffset(t, path))+20)
		}, true},
		{"older wal segment", func(t *testing.T, dir string) {
			older := filepath.Join(dir, "000001.log")
			f, err := os.Create(older)
			if err != nil {
				t.Fatal(err)
			}
			w := record.NewLogWriter(f, 1, record.LogWriterConfig{})
			for range 10 {
				if _, err := w.WriteRecord(make([]byte, 500)); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			flip(t, older, 2000)
		}, false},
		{"table", func(t *testing.T, dir string) { flip(t, file(t, dir, "", ".sst"), 5000) }, false},
		{"MANIFEST", func(t *testing.T, dir string) { flip(t, file(t, dir, "MANIFEST-", ""), 40) }, false},
		{"CURRENT", func(t *testing.T, dir string) { flip(t, filepath.Join(dir, "CURRENT"), 9) }, false},
		{"OPTIONS", func(t *testing.T, dir string) { flip(t, file(t, dir, "OPTIONS-", ""), 12) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			buildStore(t, dir)
			c.damage(t, dir)
			l, err := Open(dir, Options{})
			if c.tailCut {
				if err != nil {
					t.Fatalf("open: %v, want the log cut at the damage", err)
				}
				defer l.Close()
				if len(l.Damage()) != 1 || l.Last() >= 150 {
					t.Fatalf("damage %v, last %d: want the cut reported and the last entry lost", l.Damage(), l.Last())
				}
				return
			}
			if err == nil {
				l.Close()
				t.Fatal("damaged store opened")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v, want ErrCorrupt", err)
			}
			t.Logf("%v", err)
		})
	}
}

// lastRecordOffset is where the last record of a WAL segment starts.
func lastRecordOffset(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := int64(-1)
	for pos := 0; pos < len(b); pos++ {
		if recordStartsAt(b, pos, logNum(t, path)) {
			last = int64(pos)
		}
	}
	if last < 0 {
		t.Fatalf("no record in %s", path)
	}
	return last
}

func logNum(t *testing.T, path string) uint64 {
	var n uint64
	for _, c := range strings.TrimSuffix(filepath.Base(path), ".log") {
		n = n*10 + uint64(c-'0')
	}
	return n
}
