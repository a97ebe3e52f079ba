// Package testfs gives tests a real, small file system they can fill up:
// a tmpfs mounted for the test (Linux, as root), and helpers that fill it
// and free it again.
package testfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new directory and unmounts it
// when the test ends. Without root (or without mount) it skips the test,
// saying why, unless the CI environment variable is set: CI runs as root,
// and there a missing full-disk test is a failure.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	skip := func(why string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("cannot mount a tmpfs for the full-disk test under CI: %s", why)
		}
		t.Skipf("SKIPPED: this full-disk test mounts a tmpfs and needs root: %s", why)
	}
	if os.Geteuid() != 0 {
		skip("not root")
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		skip(fmt.Sprintf("mount: %v: %s", err, out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Fill fills the file system under dir with a file, leaving about keep
// bytes free, and returns the file's path (remove it to free the space).
// It first takes the space at once (fallocate: no writer on the file
// system gets a chance to see it fill up gradually), then writes into
// what is left.
func Fill(t testing.TB, dir string, keep int64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := Free(t, dir) - keep; n > 0 {
		_ = syscall.Fallocate(int(f.Fd()), 0, 0, n) // (ENOSPC: the loop below)
	}
	buf := make([]byte, 64<<10)
	for {
		free := Free(t, dir)
		if free <= keep {
			return path
		}
		n := min(int64(len(buf)), free-keep)
		if _, err := f.Write(buf[:n]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return path
			}
			t.Fatal(err)
		}
	}
}

// Free is the space left on dir's file system for an unprivileged
// writer, in bytes.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
