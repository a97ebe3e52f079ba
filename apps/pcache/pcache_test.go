package pcache_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/internal/appkit/appkittest"
	"github.com/neptune-cluster/neptune/apps/pcache"
	"github.com/neptune-cluster/neptune/internal/testfs"
)

func open(t *testing.T, dir string) *pcache.Cache {
	t.Helper()
	c, err := pcache.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestUpdateLookup(t *testing.T) {
	svc := open(t, t.TempDir()).Service()
	lookup := func(p int, key string) pcache.LookupResponse {
		return appkittest.MustCall[pcache.LookupResponse](t, svc, "CacheLookup", p, 0, pcache.LookupRequest{Key: key})
	}
	if got := lookup(0, "q"); got.Found {
		t.Fatalf("lookup in an empty cache = %+v", got)
	}
	appkittest.MustCall[pcache.UpdateResponse](t, svc, "CacheUpdate", 0, 0, pcache.UpdateRequest{Key: "q", Value: "v1"})
	appkittest.MustCall[pcache.UpdateResponse](t, svc, "CacheUpdate", 1, 0, pcache.UpdateRequest{Key: "q", Value: "other"})
	appkittest.MustCall[pcache.UpdateResponse](t, svc, "CacheUpdate", 0, 0, pcache.UpdateRequest{Key: "q", Value: "v2"})
	if got := lookup(0, "q"); got != (pcache.LookupResponse{Key: "q", Value: "v2", Found: true}) {
		t.Fatalf("lookup(0, q) = %+v", got)
	}
	if got := lookup(1, "q"); got.Value != "other" {
		t.Fatalf("partitions are not independent: lookup(1, q) = %+v", got)
	}
	if got := lookup(0, "missing"); got.Found || got.Value != "" {
		t.Fatalf("miss = %+v", got)
	}
}

func TestBadInput(t *testing.T) {
	svc := open(t, t.TempDir()).Service()
	for _, tc := range []struct {
		name, method, body, text string
	}{
		{"not json", "CacheUpdate", "q=v", "CacheUpdate"},
		{"empty key", "CacheUpdate", `{"value":"v"}`, "key is empty"},
		{"unknown field", "CacheUpdate", `{"key":"k","val":"v"}`, "val"},
		{"lookup not json", "CacheLookup", "q", "CacheLookup"},
		{"lookup empty key", "CacheLookup", `{}`, "key is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := appkittest.Call(t, svc, tc.method, 0, 0, tc.body)
			if !errors.Is(err, pcache.ErrBadRequest) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want ErrBadRequest mentioning %q", err, tc.text)
			}
		})
	}
}

// TestLSNPersistsWithData checks CHECK and replay across a reopen of the
// file.
func TestLSNPersistsWithData(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c := open(t, dir)
	svc := c.Service()
	appkittest.MustCall[pcache.UpdateResponse](t, svc, "CacheUpdate", 2, 5, pcache.UpdateRequest{Key: "k", Value: "five"})
	if r := appkittest.MustCall[pcache.UpdateResponse](t, svc, "CacheUpdate", 2, 5, pcache.UpdateRequest{Key: "k", Value: "again"}); !r.Replayed {
		t.Fatal("replay of LSN 5 was applied")
	}
	if r := appkittest.MustCall[pcache.UpdateResponse](t, svc, "CacheUpdate", 2, 4, pcache.UpdateRequest{Key: "k", Value: "old"}); !r.Replayed {
		t.Fatal("LSN 4 after 5 was applied")
	}
	c.Close()
	svc = open(t, dir).Service()
	for _, tc := range []struct {
		part int
		lsn  uint64
		want bool
	}{{2, 4, true}, {2, 5, true}, {2, 6, false}, {3, 1, false}} {
		if ok, err := svc.Check(ctx, tc.part, tc.lsn); ok != tc.want || err != nil {
			t.Fatalf("Check(%d, %d) = %v, %v; want %v", tc.part, tc.lsn, ok, err, tc.want)
		}
	}
	if got := appkittest.MustCall[pcache.LookupResponse](t, svc, "CacheLookup", 2, 0, pcache.LookupRequest{Key: "k"}); got.Value != "five" {
		t.Fatalf("after reopen, k = %+v", got)
	}
}

// pcache's snapshots (appkittest.TestSnapshots): each write caches a new
// key.
func TestSnapshots(t *testing.T) {
	appkittest.TestSnapshots(t, func(t *testing.T) string { return t.TempDir() },
		func(t *testing.T, dir string) appkittest.Store { return open(t, dir) },
		func(t *testing.T, svc neptune.Service, part int, lsn uint64) {
			appkittest.MustCall[pcache.UpdateResponse](t, svc, "CacheUpdate", part, lsn,
				pcache.UpdateRequest{Key: fmt.Sprintf("k%d", lsn), Value: strings.Repeat("v", int(lsn))})
		},
		func(t *testing.T, svc neptune.Service, part int) int {
			n := 0
			for i := 1; i <= 200; i++ {
				if appkittest.MustCall[pcache.LookupResponse](t, svc, "CacheLookup", part, 0, pcache.LookupRequest{Key: fmt.Sprintf("k%d", i)}).Found {
					n++
				}
			}
			return n
		})
}

// TestFullDiskIsAStorageError: an update on a real full file system fails
// wrapping neptune.ErrStorage (it did not happen; a replica runs it again
// later) and succeeds once space is freed.
func TestFullDiskIsAStorageError(t *testing.T) {
	dir := testfs.Tmpfs(t, 16<<20)
	svc := open(t, dir+"/cache").Service()
	filler := testfs.Fill(t, dir, 0)
	var err error
	i := 0
	for ; i < 1000 && err == nil; i++ {
		_, err = appkittest.Call(t, svc, "CacheUpdate", 0, uint64(i+1), pcache.UpdateRequest{Key: fmt.Sprint("k", i), Value: strings.Repeat("v", 64<<10)})
	}
	if !errors.Is(err, neptune.ErrStorage) {
		t.Fatalf("update %d on a full disk: %v, want ErrStorage", i, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := appkittest.Call(t, svc, "CacheUpdate", 0, uint64(i+1), pcache.UpdateRequest{Key: "after", Value: "v"}); err != nil {
		t.Fatalf("update once space returned: %v", err)
	}
}
