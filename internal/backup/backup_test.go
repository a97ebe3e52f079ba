package backup

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// write makes a backup of parts (partition → bytes) in dir.
func write(t testing.TB, dir string, parts ...[]byte) string {
	t.Helper()
	h := Header{Service: "kv", Created: time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC), Release: "test"}
	var spools []*Spool
	for i, b := range parts {
		s, err := NewSpool(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Write([]byte("junk")); err != nil {
			t.Fatal(err)
		}
		if err := s.Reset(); err != nil { // a failed first try
			t.Fatal(err)
		}
		if _, err := s.Write(b); err != nil {
			t.Fatal(err)
		}
		spools = append(spools, s)
		h.Partitions = append(h.Partitions, Part{Partition: i * 2, LSN: uint64(100 + i), Node: "a"})
	}
	path := filepath.Join(dir, "kv.nbk")
	if err := Write(path, h, spools); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	parts := [][]byte{[]byte("partition zero"), {}, bytes.Repeat([]byte("x"), 300<<10)}
	path := write(t, dir, parts...)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Service != "kv" || f.Format != Format || len(f.Partitions) != 3 || f.Partitions[2].Partition != 4 || f.Partitions[2].LSN != 102 {
		t.Fatalf("header %+v", f.Header)
	}
	var last int64
	if err := f.Verify(func(n int64) { last = n }); err != nil {
		t.Fatal(err)
	}
	if want := int64(len(parts[0]) + len(parts[2])); last != want {
		t.Errorf("progress ended at %d, want %d", last, want)
	}
	for i, want := range parts {
		r, err := f.Open(f.Find(i * 2))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("partition %d: %d bytes, %v; want %d bytes", i*2, len(got), err, len(want))
		}
	}
	if f.Find(1) != -1 {
		t.Error("Find(1) found a partition the backup lacks")
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".neptune-backup*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// TestDamageIsRefused: every byte flipped, a cut anywhere, and bytes
// appended are refused with ErrCorrupt (by Open or by Verify).
func TestDamageIsRefused(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(write(t, dir, []byte("partition zero"), []byte("partition two")))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, b []byte) {
		t.Helper()
		path := filepath.Join(dir, "bad.nbk")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err == nil {
			err = f.Verify(nil)
			f.Close()
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", what, err)
		}
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		check("flipped byte "+strconv.Itoa(i), b)
	}
	for n := range len(good) {
		check("cut at "+strconv.Itoa(n), good[:n])
	}
	check("extended", append(bytes.Clone(good), 0))
}

// FuzzOpen: whatever a file holds, Open and Verify return an error or
// succeed, never panic or allocate beyond the file.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	good, _ := os.ReadFile(write(f, dir, []byte("partition zero"), []byte("two")))
	f.Add(good)
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "f.nbk")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		bf, err := Open(path)
		if err != nil {
			return
		}
		defer bf.Close()
		_ = bf.Verify(nil)
	})
}
