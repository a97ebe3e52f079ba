package appkit

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/testfs"
)

// TestPebbleSurvivesAFullDisk: on a real full file system (tmpfs) a commit
// fails with neptune.ErrStorage and ENOSPC instead of exiting the process,
// and once space is freed the store reopens with every commit that
// succeeded and takes writes again.
func TestPebbleSurvivesAFullDisk(t *testing.T) {
	dir := testfs.Tmpfs(t, 16<<20)
	p, err := OpenPebble(dir + "/db")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	filler := testfs.Fill(t, dir, 64<<10)
	put := func(i int) error {
		db, err := p.DB()
		if err != nil {
			return err
		}
		b := db.NewBatch()
		defer b.Close()
		_ = b.Set(fmt.Appendf(nil, "k%05d", i), make([]byte, 4<<10), nil)
		return p.Commit(b)
	}
	ok := 0
	for ; ok < 10000; ok++ {
		if err = put(ok); err != nil {
			break
		}
	}
	if !errors.Is(err, neptune.ErrStorage) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("after %d commits: %v, want ErrStorage and ENOSPC", ok, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := put(ok); err != nil {
		t.Fatalf("commit once space returned: %v", err)
	}
	db, err := p.DB()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= ok; i++ {
		if _, closer, err := db.Get(fmt.Appendf(nil, "k%05d", i)); err != nil {
			t.Fatalf("key %d of %d committed: %v", i, ok+1, err)
		} else {
			closer.Close()
		}
	}
}
