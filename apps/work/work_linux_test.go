package work

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// writeBytes is the calling thread's write_bytes (what
// /proc/thread-self/io shows, read as the node reads it: getrusage's
// output blocks of 512 bytes), false if it cannot be read.
func writeBytes(t *testing.T) (int64, bool) {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return ru.Oublock * 512, true
}

// Every fsync call writes its bytes to the device again, though its
// scratch file is reused, and leaves no file behind.
func TestFsyncWritesEveryCallAndLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	svc := Service()
	const n = 100_000
	for i := range 3 {
		w0, ok := writeBytes(t)
		if _, err := call(t, svc, "fsync", EncodeBytes(n)); err != nil {
			t.Fatal(err)
		}
		w1, _ := writeBytes(t)
		if !ok || w1 == w0 && i == 0 {
			t.Skip("no per-task write_bytes here, or the temp dir's filesystem counts none (tmpfs?)")
		}
		if w1-w0 < n {
			t.Errorf("call %d: %d bytes written to the device, want at least %d", i, w1-w0, n)
		}
	}
	if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
		t.Errorf("temp dir holds %d entries (%v), want none", len(es), err)
	}
}
