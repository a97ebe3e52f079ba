package listappend

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble"

	"github.com/neptune-cluster/neptune"
)

// call runs one method of s's service in-process, as a node would.
func call(t *testing.T, s *Store, method string, part int, lsn uint64, body []byte) ([]byte, error) {
	t.Helper()
	svc := s.Service()
	for _, m := range svc.Methods {
		if m.Name == method {
			resp, err := m.Handler(context.Background(), &neptune.Request{
				Service: svc.Name, Partition: part, Method: method, Mode: m.Mode, Body: body, LSN: lsn})
			if err != nil {
				return nil, err
			}
			return resp.Body, nil
		}
	}
	t.Fatalf("no method %s", method)
	return nil, nil
}

func mustAppend(t *testing.T, s *Store, part int, lsn uint64, key string, elem uint64) {
	t.Helper()
	if _, err := call(t, s, "append", part, lsn, EncodeAppend(key, elem)); err != nil {
		t.Fatalf("append %s=%d: %v", key, elem, err)
	}
}

func mustRead(t *testing.T, s *Store, part int, key string) []uint64 {
	t.Helper()
	b, err := call(t, s, "read", part, 0, []byte(key))
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	l, err := DecodeList(b)
	if err != nil {
		t.Fatalf("read %s answered %q: %v", key, b, err)
	}
	return l
}

func mustDigest(t *testing.T, s *Store, part int) Digest {
	t.Helper()
	b, err := call(t, s, "digest", part, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDigest(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustCheck(t *testing.T, s *Store, part int, lsn uint64) bool {
	t.Helper()
	ok, err := s.Check(context.Background(), part, lsn)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// backends runs f against the in-memory and the pebble store.
func backends(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("memory", func(t *testing.T) { f(t, New()) })
	t.Run("pebble", func(t *testing.T) { f(t, open(t, t.TempDir())) })
}

func TestServiceValidates(t *testing.T) {
	svc := New().Service()
	if err := svc.Validate(); err != nil {
		t.Fatal(err)
	}
	if svc.Check == nil {
		t.Fatal("no Check callback: recovery would reissue applied appends")
	}
}

func TestAppendReadRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		if got := mustRead(t, s, 0, "k"); len(got) != 0 {
			t.Fatalf("a key never appended to reads %v, want an empty list", got)
		}
		want := []uint64{3, 0, 18446744073709551615, 42, 3}
		for i, e := range want {
			mustAppend(t, s, 0, uint64(i+1), "k", e)
		}
		mustAppend(t, s, 0, 6, "other", 7)
		mustAppend(t, s, 1, 1, "k", 99)
		if got := mustRead(t, s, 0, "k"); !slices.Equal(got, want) {
			t.Fatalf("read k = %v, want %v (in append order, repeats kept)", got, want)
		}
		if got := mustRead(t, s, 1, "k"); !slices.Equal(got, []uint64{99}) {
			t.Fatalf("partition 1 read k = %v: partitions are not independent", got)
		}
		if b, _ := call(t, s, "read", 0, 0, []byte("other")); string(b) != "7" {
			t.Fatalf("read body %q, want \"7\"", b)
		}
		if d := mustDigest(t, s, 0); d.Keys != 2 || d.Elements != 6 || d.LSN != 6 {
			t.Fatalf("digest %v, want 2 keys, 6 elements, lsn 6", d)
		}
	})
}

// TestConcurrentAppends runs unreplicated appends from many goroutines
// (what a node's worker pool does): each goroutine's elements stay in its
// own order and none is lost or doubled.
func TestConcurrentAppends(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		const writers, each = 8, 10
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					if _, err := call(t, s, "append", 0, 0, EncodeAppend("k", uint64(w*each+i))); err != nil {
						t.Error(err)
					}
					if _, err := call(t, s, "read", 0, 0, []byte("k")); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		got := mustRead(t, s, 0, "k")
		if len(got) != writers*each {
			t.Fatalf("%d elements, want %d", len(got), writers*each)
		}
		next := make([]int, writers)
		for _, e := range got {
			w, i := int(e)/each, int(e)%each
			if i != next[w] {
				t.Fatalf("writer %d's element %d out of order in %v", w, i, got)
			}
			next[w]++
		}
	})
}

func TestBadBodies(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
	for _, tc := range []struct {
		name, method string
		body         []byte
		want         error
		text         string
	}{
		{"no separator", "append", []byte("k7"), ErrBadRequest, "key=element"},
		{"empty key", "append", []byte("=7"), ErrBadRequest, "key is empty"},
		{"empty element", "append", []byte("k="), ErrBadRequest, "element is empty"},
		{"negative", "append", []byte("k=-1"), ErrBadRequest, "not a decimal"},
		{"plus sign", "append", []byte("k=+1"), ErrBadRequest, "not a decimal"},
		{"leading zero", "append", []byte("k=07"), ErrBadRequest, "leading zero"},
		{"overflow", "append", []byte("k=18446744073709551616"), ErrBadRequest, "out of range"},
		{"too many digits", "append", []byte("k=123456789012345678901"), ErrBadRequest, "longer than a uint64"},
		{"two separators", "append", []byte("k=1=2"), ErrBadRequest, "not a decimal"},
		{"space in key", "append", []byte("a b=1"), ErrBadRequest, "printable"},
		{"control in key", "append", []byte("a\x00b=1"), ErrBadRequest, "printable"},
		{"not utf-8", "append", []byte("\xff=1"), ErrBadRequest, "not UTF-8"},
		{"key too long", "append", []byte(long + "=1"), ErrTooLarge, "the limit is 256"},
		{"body too long", "append", bytes.Repeat([]byte("k"), MaxAppendBody+1), ErrTooLarge, "append body is 278 bytes"},
		{"huge body", "append", make([]byte, 60<<20), ErrTooLarge, "append body is 62914560 bytes"},
		{"read empty", "read", nil, ErrBadRequest, "key is empty"},
		{"read with =", "read", []byte("k=1"), ErrBadRequest, "'='"},
		{"read too long", "read", []byte(long), ErrTooLarge, "the longest key is 256"},
		{"digest with body", "digest", []byte("x"), ErrBadRequest, "no body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			_, err := call(t, s, tc.method, 0, 1, tc.body)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.text)
			}
			if len(err.Error()) > 200 {
				t.Fatalf("error is %d bytes long; it must not echo the body: %.200s", len(err.Error()), err)
			}
			if d := mustDigest(t, s, 0); d.Elements != 0 || d.LSN != 0 || mustCheck(t, s, 0, 1) {
				t.Fatalf("a rejected request changed the state: %v", d)
			}
		})
	}
}

func TestListFull(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		s.maxListBytes = len("1 22 333") // room for exactly three elements
		mustAppend(t, s, 0, 1, "k", 1)
		mustAppend(t, s, 0, 2, "k", 22)
		mustAppend(t, s, 0, 3, "k", 333)
		_, err := call(t, s, "append", 0, 4, EncodeAppend("k", 4))
		if !errors.Is(err, ErrListFull) || !strings.Contains(err.Error(), "3 elements") {
			t.Fatalf("append to a full list: err = %v, want ErrListFull", err)
		}
		if got := mustRead(t, s, 0, "k"); !slices.Equal(got, []uint64{1, 22, 333}) {
			t.Fatalf("read %v after a rejected append", got)
		}
		if mustCheck(t, s, 0, 4) {
			t.Fatal("Check says the rejected append was applied")
		}
		mustAppend(t, s, 0, 5, "other", 5) // other keys are unaffected
		if b, _ := call(t, s, "read", 0, 0, []byte("k")); len(b) > s.maxListBytes {
			t.Fatalf("read answer %d bytes, over the cap %d", len(b), s.maxListBytes)
		}
	})
}

func TestCheck(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		if mustCheck(t, s, 0, 1) {
			t.Fatal("Check(1) true on an empty partition")
		}
		mustAppend(t, s, 0, 0, "k", 1) // unreplicated: no LSN to record
		if mustCheck(t, s, 0, 1) {
			t.Fatal("an append without an LSN moved the recorded LSN")
		}
		mustAppend(t, s, 0, 4, "k", 2)
		mustAppend(t, s, 0, 7, "k", 3)
		for lsn, want := range map[uint64]bool{1: true, 4: true, 5: true, 7: true, 8: false, 100: false} {
			if got := mustCheck(t, s, 0, lsn); got != want {
				t.Errorf("Check(0, %d) = %v, want %v", lsn, got, want)
			}
		}
		if mustCheck(t, s, 1, 1) {
			t.Error("Check on another partition sees partition 0's LSN")
		}
	})
}

func TestReplayIsNotAppliedTwice(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		mustAppend(t, s, 0, 5, "k", 1)
		mustAppend(t, s, 0, 5, "k", 1) // the same write again
		mustAppend(t, s, 0, 3, "k", 2) // an older one
		if got := mustRead(t, s, 0, "k"); !slices.Equal(got, []uint64{1}) {
			t.Fatalf("read %v, want [1]: a replayed LSN was applied", got)
		}
		if d := mustDigest(t, s, 0); d.Replays != 2 || d.LSN != 5 {
			t.Fatalf("digest %v, want 2 replays at lsn 5", d)
		}
		mustAppend(t, s, 0, 0, "k", 3) // unreplicated appends are never replays
		mustAppend(t, s, 0, 0, "k", 3)
		if got := mustRead(t, s, 0, "k"); !slices.Equal(got, []uint64{1, 3, 3}) {
			t.Fatalf("read %v, want [1 3 3]", got)
		}
	})
}

func TestRestartKeepsStateAndLSN(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, 0, 1, "a", 10)
	mustAppend(t, s, 0, 2, "b", 20)
	mustAppend(t, s, 0, 3, "a", 11)
	mustAppend(t, s, 2, 9, "a", 30)
	before := []Digest{mustDigest(t, s, 0), mustDigest(t, s, 2)}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, s, "read", 0, 0, []byte("a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after Close: err = %v, want ErrClosed", err)
	}

	s = open(t, dir)
	if got := mustRead(t, s, 0, "a"); !slices.Equal(got, []uint64{10, 11}) {
		t.Fatalf("after reopening, read a = %v, want [10 11]", got)
	}
	if got := mustRead(t, s, 2, "a"); !slices.Equal(got, []uint64{30}) {
		t.Fatalf("after reopening, partition 2 read a = %v, want [30]", got)
	}
	after := []Digest{mustDigest(t, s, 0), mustDigest(t, s, 2)}
	if after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("digests changed across a restart:\nbefore %v\nafter  %v", before, after)
	}
	if !mustCheck(t, s, 0, 3) || mustCheck(t, s, 0, 4) || !mustCheck(t, s, 2, 9) || mustCheck(t, s, 2, 10) {
		t.Fatal("Check after reopening does not match the LSNs applied before")
	}
	// Recovery reissuing an applied write must not double it; a new write
	// continues the list where it was.
	mustAppend(t, s, 0, 3, "a", 11)
	mustAppend(t, s, 0, 4, "a", 12)
	if got := mustRead(t, s, 0, "a"); !slices.Equal(got, []uint64{10, 11, 12}) {
		t.Fatalf("read a = %v, want [10 11 12]", got)
	}
	// The list's encoded size is restored too, so the cap still holds.
	s.maxListBytes = len("10 11 12")
	if _, err := call(t, s, "append", 0, 5, EncodeAppend("a", 1)); !errors.Is(err, ErrListFull) {
		t.Fatalf("err = %v, want ErrListFull from the reloaded size", err)
	}
}

func TestOpenRefusesForeignData(t *testing.T) {
	t.Run("no marker", func(t *testing.T) {
		dir := t.TempDir()
		db, err := pebble.Open(dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// What apps/kv stores: 'k' partition key -> value.
		if err := db.Set([]byte("k\x00\x00\x00\x00key"), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if _, err := Open(dir); !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), "no list-append format marker") {
			t.Fatalf("Open of another store's directory: err = %v", err)
		}
	})
	t.Run("other version", func(t *testing.T) {
		dir := t.TempDir()
		writeRaw(t, dir, map[string][]byte{string(formatKey): []byte("2")})
		if _, err := Open(dir); !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), `format "2"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing element", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		mustAppend(t, s, 0, 1, "k", 1)
		mustAppend(t, s, 0, 2, "k", 2)
		s.Close()
		// Delete element 0 of k behind the store's back.
		db, err := pebble.Open(dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Delete([]byte("e\x00\x00\x00\x00\x00\x01k\x00\x00\x00\x00\x00\x00\x00\x00"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if _, err := Open(dir); !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), "element 1 after 0 elements") {
			t.Fatalf("Open with a gap in a list: err = %v", err)
		}
	})
	t.Run("unknown record", func(t *testing.T) {
		dir := t.TempDir()
		writeRaw(t, dir, map[string][]byte{string(formatKey): formatVersion, "zzzzz": make([]byte, 8)})
		if _, err := Open(dir); !errors.Is(err, errCorrupt) {
			t.Fatalf("err = %v", err)
		}
	})
}

func writeRaw(t *testing.T, dir string, kvs map[string][]byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for k, v := range kvs {
		if err := db.Set([]byte(k), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDigestComparesState(t *testing.T) {
	a, b := New(), New()
	if mustDigest(t, a, 0).Sum != mustDigest(t, b, 0).Sum {
		t.Fatal("empty partitions differ")
	}
	// Same lists reached through different LSNs and key order: same Sum.
	mustAppend(t, a, 0, 1, "x", 1)
	mustAppend(t, a, 0, 2, "y", 2)
	mustAppend(t, b, 0, 0, "y", 2)
	mustAppend(t, b, 0, 0, "x", 1)
	da, db := mustDigest(t, a, 0), mustDigest(t, b, 0)
	if da.Sum != db.Sum || da.LSN == db.LSN {
		t.Fatalf("equal lists: %v vs %v, want equal sums and different LSNs", da, db)
	}
	// Different order within a list, or an element moved between keys whose
	// names concatenate alike: different Sum.
	c, d := New(), New()
	mustAppend(t, c, 0, 0, "x", 1)
	mustAppend(t, c, 0, 0, "x", 2)
	mustAppend(t, d, 0, 0, "x", 2)
	mustAppend(t, d, 0, 0, "x", 1)
	if mustDigest(t, c, 0).Sum == mustDigest(t, d, 0).Sum {
		t.Fatal("[1 2] and [2 1] digest alike")
	}
	e, f := New(), New()
	mustAppend(t, e, 0, 0, "ab", 1)
	mustAppend(t, f, 0, 0, "a", 1)
	if mustDigest(t, e, 0).Sum == mustDigest(t, f, 0).Sum {
		t.Fatal("different keys digest alike")
	}
}

func TestParseDigest(t *testing.T) {
	want := Digest{Keys: 2, Elements: 5, LSN: 9, Replays: 1, Sum: [32]byte{1, 2, 3}}
	got, err := ParseDigest([]byte(want.String()))
	if err != nil || got != want {
		t.Fatalf("ParseDigest(%q) = %v, %v", want.String(), got, err)
	}
	for _, bad := range []string{"", "keys=1", want.String() + " ", strings.ToUpper(want.String()),
		strings.Replace(want.String(), "sha256=01", "sha256=zz", 1)} {
		if _, err := ParseDigest([]byte(bad)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("ParseDigest(%q): err = %v, want ErrBadRequest", bad, err)
		}
	}
}
