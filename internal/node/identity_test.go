package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClaimIdentity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for want := uint64(1); want <= 3; want++ {
		id, err := claimIdentity(dir, "c1", "a")
		if err != nil {
			t.Fatal(err)
		}
		if id.Sum = 0; id != (Identity{Cluster: "c1", Node: "a", Incarnation: want}) {
			t.Fatalf("start %d: identity %+v", want, id)
		}
	}
	for _, tt := range []struct{ cluster, node, names string }{
		{"c1", "b", `node "a"`},
		{"c2", "a", `cluster "c1"`},
	} {
		_, err := claimIdentity(dir, tt.cluster, tt.node)
		if !errors.Is(err, ErrForeignDataDir) || !strings.Contains(err.Error(), tt.names) {
			t.Fatalf("claim as %s/%s: %v, want ErrForeignDataDir naming %s", tt.cluster, tt.node, err, tt.names)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("data directory holds %d files, want only the identity (no temp files left)", len(entries))
	}
}

func TestClaimIdentityRefusesGarbage(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, IdentityFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := claimIdentity(dir, "c", "a"); err == nil {
		t.Fatal("a corrupt identity file was accepted")
	}
}

// TestClaimIdentityRefusesAFlippedByte: a byte flipped anywhere in the
// identity file, even one that leaves valid JSON, is ErrCorruptIdentity,
// and the error says how to repair it.
func TestClaimIdentityRefusesAFlippedByte(t *testing.T) {
	dir := t.TempDir()
	if _, err := claimIdentity(dir, "c", "a"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, IdentityFile)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := range len(orig) - 1 { // (the final newline is outside the record)
		b := append([]byte(nil), orig...)
		b[off] ^= 0x01
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := claimIdentity(dir, "c", "a")
		if !errors.Is(err, ErrCorruptIdentity) || !strings.Contains(err.Error(), "remove the file") {
			t.Fatalf("byte %d (%q) flipped: %v, want ErrCorruptIdentity saying how to repair", off, orig[off], err)
		}
	}
}
