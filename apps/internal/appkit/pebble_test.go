package appkit

import (
	"context"
	"database/sql"
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

// TestSQLiteFullDiskIsAStorageError: a SQLite write on a real full file
// system fails wrapping neptune.ErrStorage (not as the write's result),
// and succeeds once space is freed.
func TestSQLiteFullDiskIsAStorageError(t *testing.T) {
	dir := testfs.Tmpfs(t, 16<<20)
	ctx := context.Background()
	db, err := Open(ctx, dir+"/app.sqlite", "lsns", []string{`CREATE TABLE IF NOT EXISTS t (v BLOB)`})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	filler := testfs.Fill(t, dir, 0)
	write := func(lsn uint64) error {
		_, err := db.Write(ctx, 0, lsn, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO t (v) VALUES ($1)`, make([]byte, 64<<10))
			return err
		})
		return err
	}
	lsn := uint64(1)
	for ; lsn < 1000; lsn++ {
		if err = write(lsn); err != nil {
			break
		}
	}
	if !errors.Is(err, neptune.ErrStorage) {
		t.Fatalf("write %d on a full disk: %v, want ErrStorage", lsn, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := write(lsn); err != nil {
		t.Fatalf("write once space returned: %v", err)
	}
}
