package listappend

import (
	"bytes"
	"context"
	"slices"
	"testing"
)

// A snapshot carries a partition's lists and LSN to another store, which
// keeps them across a restart; a cut-off image changes nothing.
func TestSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	src := New()
	for i := range 5 {
		mustAppend(t, src, 0, uint64(i+1), "a", uint64(10+i))
	}
	mustAppend(t, src, 0, 6, "b", 7)
	mustAppend(t, src, 1, 1, "other", 1)
	var img bytes.Buffer
	lsn, err := src.Snapshot(ctx, 0, &img)
	if err != nil || lsn != 6 {
		t.Fatalf("Snapshot = %d, %v; want 6", lsn, err)
	}

	dir := t.TempDir()
	dst, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, dst, 0, 1, "stale", 99) // replaced by the restore
	if _, err := dst.Restore(ctx, 0, bytes.NewReader(img.Bytes()[:img.Len()/2])); err == nil {
		t.Fatal("a cut-off image was restored")
	}
	if got := mustRead(t, dst, 0, "stale"); !slices.Equal(got, []uint64{99}) {
		t.Fatalf("a failed restore changed the partition: %v", got)
	}
	if lsn, err := dst.Restore(ctx, 0, bytes.NewReader(img.Bytes())); err != nil || lsn != 6 {
		t.Fatalf("Restore = %d, %v; want 6", lsn, err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	dst, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if mustDigest(t, dst, 0) != mustDigest(t, src, 0) {
		t.Fatalf("restored digest %v, source %v", mustDigest(t, dst, 0), mustDigest(t, src, 0))
	}
	if got := mustRead(t, dst, 0, "stale"); len(got) != 0 {
		t.Fatalf("the restore kept a list the image lacks: %v", got)
	}
	if ok, _ := dst.Check(ctx, 0, 6); !ok {
		t.Fatal("Check(6) after restoring an image at 6 = false")
	}
}
