package appkittest

import (
	"bytes"
	"context"
	"testing"

	"github.com/neptune-cluster/neptune"
)

// Store is a service opened on one database, for TestSnapshots.
type Store interface {
	Service() neptune.Service
	Close() error
}

// TestSnapshots checks a service's Snapshotter on one backend. open opens
// the store on a DSN; write applies write number lsn (1, 2, ...) to a
// partition with that LSN and add exactly one row (rows counts them), so
// an image's LSN says how large it must be. It checks that:
//
//   - an image carries exactly one partition at the LSN it reports, and
//     restoring it elsewhere gives a byte-identical image (same rows);
//   - a cut-off or corrupt image is refused and changes nothing;
//   - a restored partition survives a reopen, answers CHECK at its LSN,
//     and leaves the other partitions alone;
//   - images taken while writes run are each one point in their order:
//     the restored image of LSN l holds exactly the rows of writes 1..l.
func TestSnapshots(t *testing.T, dsn func(*testing.T) string, open func(*testing.T, string) Store,
	write func(t *testing.T, svc neptune.Service, part int, lsn uint64), rows func(t *testing.T, svc neptune.Service, part int) int) {
	ctx := context.Background()
	const part, other = 3, 4
	srcDSN, dstDSN := dsn(t), dsn(t)
	src := open(t, srcDSN)
	ssrc := src.Service()
	for lsn := uint64(1); lsn <= 20; lsn++ {
		write(t, ssrc, part, lsn)
	}
	write(t, ssrc, other, 1)
	img, lsn := image(t, ssrc, part)
	if lsn != 20 {
		t.Fatalf("Snapshot reports LSN %d, want 20", lsn)
	}

	dst := open(t, dstDSN)
	sdst := dst.Service()
	write(t, sdst, part, 1) // replaced by the restore
	write(t, sdst, other, 1)
	write(t, sdst, other, 2) // kept
	before, _ := image(t, sdst, part)
	for name, bad := range map[string][]byte{
		"cut off":        img[:len(img)*2/3],
		"no trailer":     img[:len(img)-2],
		"corrupt header": append([]byte{img[0], 'X'}, img[2:]...),
	} {
		if _, err := sdst.Snapshots.Restore(ctx, part, bytes.NewReader(bad)); err == nil {
			t.Fatalf("a %s image was restored", name)
		}
		if after, _ := image(t, sdst, part); !bytes.Equal(after, before) {
			t.Fatalf("a failed restore (%s) changed the partition", name)
		}
	}
	if got, err := sdst.Snapshots.Restore(ctx, part, bytes.NewReader(img)); err != nil || got != 20 {
		t.Fatalf("Restore = %d, %v; want 20", got, err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	sdst = open(t, dstDSN).Service()
	if again, l := image(t, sdst, part); !bytes.Equal(again, img) || l != 20 {
		t.Fatalf("the restored partition's image (LSN %d, %d bytes) differs from the source's (20, %d bytes)", l, len(again), len(img))
	}
	if ok, err := sdst.Check(ctx, part, 20); !ok || err != nil {
		t.Fatalf("Check(20) after the restore = %v, %v", ok, err)
	}
	if ok, _ := sdst.Check(ctx, part, 21); ok {
		t.Fatal("Check(21) after restoring an image at 20 = true")
	}
	if n := rows(t, sdst, other); n != 2 {
		t.Fatalf("the restore touched another partition: %d rows there", n)
	}
	// Writes after the image continue from the same state on both.
	write(t, ssrc, part, 21)
	write(t, sdst, part, 21)
	a, _ := image(t, ssrc, part)
	b, _ := image(t, sdst, part)
	if !bytes.Equal(a, b) {
		t.Fatal("the same write after the restore made different states")
	}

	// Images taken while writes run are each one point in their order.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for lsn := uint64(22); lsn <= 100; lsn++ {
			write(t, ssrc, part, lsn)
		}
	}()
	seen := map[uint64]bool{}
	scratch := open(t, dsn(t)).Service()
	for i := 0; ; i++ {
		if i >= 8 {
			select {
			case <-done:
			default:
				continue
			}
			break
		}
		img, l := image(t, ssrc, part)
		if _, err := scratch.Snapshots.Restore(ctx, part, bytes.NewReader(img)); err != nil {
			t.Fatal(err)
		}
		if got := rows(t, scratch, part); got != int(l) {
			t.Fatalf("image at LSN %d holds %d rows, want %d: not one point in the write order", l, got, l)
		}
		seen[l] = true
	}
	t.Logf("concurrent images at %d distinct LSNs", len(seen))
}

func image(t *testing.T, svc neptune.Service, part int) ([]byte, uint64) {
	t.Helper()
	var b bytes.Buffer
	lsn, err := svc.Snapshots.Snapshot(context.Background(), part, &b)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return b.Bytes(), lsn
}
