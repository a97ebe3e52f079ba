package pki

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
)

// TestSourceRefusesARevokedTokenOnceTheFileChanges: a token verifies
// until its id is added to the revocation file; the source sees the
// change at its next check and refuses the token saying it was revoked,
// while other tokens go on verifying. A revocation file that does not
// parse is refused and the list in force kept.
func TestSourceRefusesARevokedTokenOnceTheFileChanges(t *testing.T) {
	dir := t.TempDir()
	ca, err := Bootstrap(dir, "c", n1)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Now())
	f := FilesFor(dir, n1)
	s := source(t, f, func(c *SourceConfig) { c.Clock, c.Interval = clk, time.Minute })
	issue := func() (string, Token) {
		tok, err := ca.IssueToken(ops, time.Hour, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.VerifyToken(tok)
		if err != nil || info.Identity != ops || info.ID == "" {
			t.Fatalf("a fresh token: %+v, %v", info, err)
		}
		return tok, info
	}
	tok, info := issue()
	other, _ := issue()

	if added, err := Revoke(f.Revoked, Revocation{ID: info.ID, Subject: ops.URI().String(), Expires: info.Expires, Revoked: clk.Now()}, clk.Now()); err != nil || !added {
		t.Fatalf("Revoke: %v, %v", added, err)
	}
	if _, err := s.VerifyToken(tok); err != nil {
		t.Fatalf("refused before the next check: %v", err)
	}
	clk.Advance(time.Minute)
	_, err = s.VerifyToken(tok)
	if !errors.Is(err, ErrTokenRevoked) || !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "revoked") || !strings.Contains(err.Error(), info.ID) {
		t.Fatalf("a revoked token: %v; want ErrTokenRevoked naming its id", err)
	}
	if _, err := s.VerifyToken(other); err != nil {
		t.Fatalf("another token: %v", err)
	}

	// A broken file is not loaded; the revocation stays in force.
	if err := os.WriteFile(f.Revoked, []byte("not a revocation line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if _, err := s.VerifyToken(tok); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("after a broken revocation file: %v; want the token still revoked", err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("Reload of a broken revocation file succeeded")
	}
	// A member whose file is broken at start does not start.
	if _, err := NewSource(SourceConfig{Files: f}); err == nil {
		t.Fatal("a source loaded a broken revocation file")
	}
	// Deleting the file lifts every revocation.
	if err := os.Remove(f.Revoked); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if _, err := s.VerifyToken(tok); err != nil {
		t.Fatalf("with no revocation file: %v", err)
	}
}

// TestRevokeKeepsTheFileTidy: revoking twice lists the token once; lines
// of tokens expired by now are dropped as the file is rewritten, those
// of unknown expiry kept; bad ids and lines are refused.
func TestRevokeKeepsTheFileTidy(t *testing.T) {
	path := t.TempDir() + "/" + RevokedTokensFile
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, r := range []Revocation{
		{ID: "old", Expires: now.Add(time.Hour), Revoked: now},
		{ID: "byid", Revoked: now},
		{ID: "live", Subject: "neptune://scraper/prom", Expires: now.Add(3 * time.Hour), Revoked: now},
	} {
		if added, err := Revoke(path, r, now); err != nil || !added {
			t.Fatalf("Revoke(%s): %v, %v", r.ID, added, err)
		}
	}
	if added, err := Revoke(path, Revocation{ID: "live", Revoked: now}, now); err != nil || added {
		t.Fatalf("revoking again: %v, %v; want not added", added, err)
	}
	later := now.Add(2 * time.Hour)
	if _, err := Revoke(path, Revocation{ID: "new", Revoked: later}, later); err != nil {
		t.Fatal(err)
	}
	rs, err := ReadRevocations(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, " "); got != "byid live new" {
		t.Fatalf("listed %q, want %q (the expired token's line dropped)", got, "byid live new")
	}
	if rs[1].Subject != "neptune://scraper/prom" || !rs[1].Expires.Equal(now.Add(3*time.Hour)) {
		t.Errorf("a line lost its details: %+v", rs[1])
	}
	if _, err := Revoke(path, Revocation{ID: "a b", Revoked: now}, now); err == nil {
		t.Error("an id with a space was accepted")
	}
	for _, bad := range []string{"x 2026-01-01T00:00:00Z -\n", "x soon - 2026-01-01T00:00:00Z\n", "x/y - - 2026-01-01T00:00:00Z\n"} {
		if _, err := ParseRevocations([]byte(bad)); err == nil {
			t.Errorf("ParseRevocations(%q) accepted it", bad)
		}
	}
	if rs, err := ReadRevocations(path + "-none"); err != nil || rs != nil {
		t.Errorf("a missing file: %v, %v; want none", rs, err)
	}
}
