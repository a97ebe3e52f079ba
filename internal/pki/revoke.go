package pki

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Revoking a token: `neptune tls token revoke` adds its id to the
// revocation file, RevokedTokensFile in the TLS directory; the operator
// copies the file to every member's TLS directory as they copy
// certificates, and each member's Source re-reads it when it changes
// (within its reload interval, no restart). A token whose id is listed is
// refused with ErrTokenRevoked. A missing file revokes nothing; a file
// that does not parse is refused as a whole (at start the member does not
// start; later it keeps the list it had), so a typo never quietly
// re-admits a revoked token.
//
// The file is text, one revoked token a line, '#' starting a comment:
//
//	<id> <expires, RFC 3339, or -> <subject, or -> <revoked at, RFC 3339>
//
// Only the id is checked; the expiry lets revoke drop a line once the
// token could not be used anyway.

// RevokedTokensFile is the revocation file's name in a TLS directory.
const RevokedTokensFile = "revoked-tokens"

// ErrTokenRevoked is a token refused because its id is revoked.
var ErrTokenRevoked = fmt.Errorf("%w: it was revoked", ErrBadToken)

// Revocation is one line of the revocation file.
type Revocation struct {
	ID string
	// Subject is the identity URI the token named, "" if unknown (the
	// token was revoked by its id alone).
	Subject string
	// Expires is when the token expires, zero if unknown.
	Expires time.Time
	Revoked time.Time
}

// maxTokenID bounds a token id.
const maxTokenID = 128

// ValidateTokenID reports whether s may be a token id: 1 to 128 letters,
// digits, '-', '_' or '.'.
func ValidateTokenID(s string) error {
	if s == "" || len(s) > maxTokenID {
		return fmt.Errorf("pki: token id %q: want 1 to %d characters", s, maxTokenID)
	}
	for i := range len(s) {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return fmt.Errorf("pki: token id %q: only letters, digits, '-', '_' and '.'", s)
		}
	}
	return nil
}

// ParseRevocations parses a revocation file's contents.
func ParseRevocations(b []byte) ([]Revocation, error) {
	var out []Revocation
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: want 4 fields (id, expires, subject, revoked at), got %d", n, len(f))
		}
		r := Revocation{ID: f[0]}
		if err := ValidateTokenID(r.ID); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		var err error
		if f[1] != "-" {
			if r.Expires, err = time.Parse(time.RFC3339, f[1]); err != nil {
				return nil, fmt.Errorf("line %d: expires: %w", n, err)
			}
		}
		if f[2] != "-" {
			r.Subject = f[2]
		}
		if r.Revoked, err = time.Parse(time.RFC3339, f[3]); err != nil {
			return nil, fmt.Errorf("line %d: revoked at: %w", n, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// FormatRevocations is rs as a revocation file.
func FormatRevocations(rs []Revocation) []byte {
	var b bytes.Buffer
	b.WriteString("# Tokens revoked with `neptune tls token revoke`: id, expires, subject, revoked at.\n")
	b.WriteString("# Copy this file to every member's TLS directory; members re-read it when it changes.\n")
	for _, r := range rs {
		exp, sub := "-", "-"
		if !r.Expires.IsZero() {
			exp = r.Expires.UTC().Format(time.RFC3339)
		}
		if r.Subject != "" {
			sub = r.Subject
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", r.ID, exp, sub, r.Revoked.UTC().Format(time.RFC3339))
	}
	return b.Bytes()
}

// ReadRevocations reads the revocation file at path; none if it does not
// exist.
func ReadRevocations(path string) ([]Revocation, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	rs, err := ParseRevocations(b)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	return rs, nil
}

// Revoke adds r to the revocation file at path (created if need be) and
// drops the lines of tokens expired by now; added is false if r.ID was
// revoked already. The file is replaced atomically, so a member reading
// it sees the old list or the new one.
func Revoke(path string, r Revocation, now time.Time) (added bool, err error) {
	if err := ValidateTokenID(r.ID); err != nil {
		return false, err
	}
	rs, err := ReadRevocations(path)
	if err != nil {
		return false, err
	}
	kept := rs[:0]
	added = true
	for _, old := range rs {
		if old.ID == r.ID {
			added = false
		}
		if old.Expires.IsZero() || old.Expires.After(now) || old.ID == r.ID {
			kept = append(kept, old)
		}
	}
	if added {
		kept = append(kept, r)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return false, fmt.Errorf("pki: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(FormatRevocations(kept)); err != nil {
		tmp.Close()
		return false, fmt.Errorf("pki: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return false, fmt.Errorf("pki: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, fmt.Errorf("pki: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("pki: %w", err)
	}
	return added, nil
}
