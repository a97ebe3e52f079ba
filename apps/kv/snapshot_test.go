package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/neptune-cluster/neptune"
)

func put(t *testing.T, s *Store, p int, lsn uint64, kv string) {
	t.Helper()
	if _, err := s.put(context.Background(), &neptune.Request{Partition: p, LSN: lsn, Body: []byte(kv)}); err != nil {
		t.Fatal(err)
	}
}

func digestOf(t *testing.T, s *Store, p int) string {
	t.Helper()
	r, err := s.digest(context.Background(), &neptune.Request{Partition: p})
	if err != nil {
		t.Fatal(err)
	}
	return string(r.Body)
}

// TestSnapshotRestore: a partition's snapshot restored into another store
// (persisted or in memory) replaces that partition's keys and LSN, leaves
// the other partitions alone, survives a reopen, and a cut-off stream
// changes nothing.
func TestSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	for _, durable := range []bool{true, false} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) {
			open := func(dir string) *Store {
				if !durable {
					return New()
				}
				s, err := Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			src := open(t.TempDir())
			defer src.Close()
			for i := range 3000 {
				put(t, src, 0, uint64(i+1), fmt.Sprintf("k%05d=v%d", i, i))
			}
			put(t, src, 1, 7, "other=x")
			var buf bytes.Buffer
			lsn, err := src.Snapshot(ctx, 0, &buf)
			if err != nil || lsn != 3000 {
				t.Fatalf("Snapshot = %d, %v; want 3000", lsn, err)
			}
			dir := t.TempDir()
			dst := open(dir)
			put(t, dst, 0, 5, "stale=1")
			put(t, dst, 2, 9, "keep=me")
			before := digestOf(t, dst, 0)
			cut := buf.Bytes()[:buf.Len()-40]
			if _, err := dst.Restore(ctx, 0, bytes.NewReader(cut)); err == nil {
				t.Fatal("Restore of a cut-off snapshot succeeded")
			}
			if got := digestOf(t, dst, 0); got != before {
				t.Fatalf("a failed Restore changed the partition: %s, was %s", got, before)
			}
			if got, err := dst.Restore(ctx, 0, bytes.NewReader(buf.Bytes())); err != nil || got != 3000 {
				t.Fatalf("Restore = %d, %v", got, err)
			}
			want := digestOf(t, src, 0)
			if got := digestOf(t, dst, 0); got != want {
				t.Fatalf("restored %s, want %s", got, want)
			}
			if ok, _ := dst.Check(ctx, 0, 3000); !ok {
				t.Fatal("Check(3000) false after the restore")
			}
			if _, err := dst.get(ctx, &neptune.Request{Partition: 0, Body: []byte("stale")}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("key from before the restore still there: %v", err)
			}
			keep := digestOf(t, dst, 2)
			if !durable {
				return
			}
			if err := dst.Close(); err != nil {
				t.Fatal(err)
			}
			dst = open(dir)
			defer dst.Close()
			if got := digestOf(t, dst, 0); got != want {
				t.Fatalf("after reopen %s, want %s", got, want)
			}
			if got := digestOf(t, dst, 2); got != keep {
				t.Fatalf("partition 2 changed: %s, was %s", got, keep)
			}
		})
	}
}
