package node

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// procWriteBytes is the calling thread's write_bytes as
// /proc/thread-self/io shows it.
func procWriteBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/io")
	if err != nil {
		t.Skipf("no per-task I/O accounting here: %v", err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("write_bytes: ")); ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no write_bytes in /proc/thread-self/io:\n%s", b)
	return 0
}

// threadIO reads the same count the proc file shows: a synced write moves
// both by the same bytes.
func TestThreadIOIsProcWriteBytes(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p0 := procWriteBytes(t)
	_, w0, ok := threadIO()
	if !ok {
		t.Fatal("threadIO failed")
	}
	if _, err := f.Write(make([]byte, 256<<10)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_, w1, _ := threadIO()
	p1 := procWriteBytes(t)
	if p1 == p0 {
		t.Skip("the temp dir's filesystem counts no write_bytes (tmpfs?)")
	}
	if w1-w0 != p1-p0 {
		t.Errorf("threadIO counted %d bytes written, /proc/thread-self/io %d", w1-w0, p1-p0)
	}
}
