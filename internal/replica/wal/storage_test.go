package wal

import (
	"errors"
	"os"
	"testing"

	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/testfs"
)

// TestFullDiskFailsWritesAndReopens fills a real (tmpfs) file system under
// a log: the write that finds no space fails with ErrFailed naming ENOSPC
// (pebble's fatal commit error no longer panics), so does every later
// one, and once space is freed the log reopens with every write that
// succeeded.
func TestFullDiskFailsWritesAndReopens(t *testing.T) {
	dir := testfs.Tmpfs(t, 16<<20)
	l, err := Open(dir+"/log", Options{})
	if err != nil {
		t.Fatal(err)
	}
	filler := testfs.Fill(t, dir, 64<<10)
	var saved replica.LSN
	var failure error
	body := make([]byte, 4<<10)
	for lsn := replica.LSN(1); lsn < 10000 && failure == nil; lsn++ {
		e := replica.Entry{Epoch: 1, LSN: lsn, Method: "put", Body: body}
		if failure = l.Save(&replica.HardState{Epoch: 1, Commit: lsn}, []replica.Entry{e}, true); failure == nil {
			saved = lsn
		}
	}
	if !errors.Is(failure, ErrFailed) || !IsNoSpace(failure) {
		t.Fatalf("write on a full disk failed with %v, want ErrFailed and ENOSPC", failure)
	}
	t.Logf("%d writes succeeded, then: %v", saved, failure)
	if err := l.Save(nil, []replica.Entry{{Epoch: 1, LSN: saved + 1, Method: "put"}}, true); !errors.Is(err, ErrFailed) {
		t.Fatalf("a write after the failure: %v, want ErrFailed", err)
	}
	_ = l.Close() // may report the failure again
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir+"/log", Options{})
	if err != nil {
		t.Fatalf("reopen after space returned: %v", err)
	}
	defer l.Close()
	if l.Last() < saved {
		t.Fatalf("reopened log ends at %d; %d writes had succeeded", l.Last(), saved)
	}
	if err := l.Save(nil, []replica.Entry{{Epoch: 1, LSN: l.Last() + 1, Method: "put"}}, true); err != nil {
		t.Fatalf("write after reopening: %v", err)
	}
}
