package pcache_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/internal/appkit/appkittest"
	"github.com/neptune-cluster/neptune/apps/pcache"
)

func openMem(t *testing.T, entries int) *pcache.Cache {
	t.Helper()
	c, err := pcache.Open(t.TempDir(), pcache.WithMemory(entries))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestMemoryHoldsTheRecentlyRead(t *testing.T) {
	c := openMem(t, 2)
	svc := c.Service()
	put := func(p int, k, v string) {
		appkittest.MustCall[pcache.UpdateResponse](t, svc, "CacheUpdate", p, 0, pcache.UpdateRequest{Key: k, Value: v})
	}
	get := func(p int, k string) string {
		return appkittest.MustCall[pcache.LookupResponse](t, svc, "CacheLookup", p, 0, pcache.LookupRequest{Key: k}).Value
	}
	for _, k := range []string{"a", "b", "c"} {
		put(0, k, k+"1")
	}
	put(1, "a", "other")
	steps := []struct {
		p          int
		key, value string
		hits, miss uint64
	}{
		{0, "a", "a1", 0, 1}, // updates do not fill the tier
		{0, "a", "a1", 1, 1},
		{1, "a", "other", 1, 2}, // partitions are apart
		{0, "b", "b1", 1, 3},    // evicts 0/a, the least recent
		{1, "a", "other", 2, 3},
		{0, "a", "a1", 2, 4},
	}
	for i, s := range steps {
		if got := get(s.p, s.key); got != s.value {
			t.Fatalf("step %d: lookup(%d, %s) = %q, want %q", i, s.p, s.key, got, s.value)
		}
		if st := c.MemoryStats(); st.Hits != s.hits || st.Misses != s.miss {
			t.Fatalf("step %d: %+v, want %d hits, %d misses", i, st, s.hits, s.miss)
		}
	}
	put(0, "a", "a2") // a held key takes the update
	if got := get(0, "a"); got != "a2" || c.MemoryStats().Hits != 3 {
		t.Fatalf("after an update, lookup = %q (%+v), want a2 from memory", got, c.MemoryStats())
	}
	c.ResetMemory()
	if got := get(0, "a"); got != "a2" || c.MemoryStats() != (pcache.MemoryStats{Misses: 1}) {
		t.Fatalf("after a reset, lookup = %q (%+v), want a2 from the file", got, c.MemoryStats())
	}
}

// A restored partition's image replaces what memory held.
func TestMemoryForgetsARestoredPartition(t *testing.T) {
	ctx := context.Background()
	old := openMem(t, 8)
	appkittest.MustCall[pcache.UpdateResponse](t, old.Service(), "CacheUpdate", 0, 0, pcache.UpdateRequest{Key: "k", Value: "old"})
	var img bytes.Buffer
	if _, err := old.Snapshot(ctx, 0, &img); err != nil {
		t.Fatal(err)
	}
	c := openMem(t, 8)
	svc := c.Service()
	appkittest.MustCall[pcache.UpdateResponse](t, svc, "CacheUpdate", 0, 0, pcache.UpdateRequest{Key: "k", Value: "new"})
	appkittest.MustCall[pcache.LookupResponse](t, svc, "CacheLookup", 0, 0, pcache.LookupRequest{Key: "k"})
	if _, err := c.Restore(ctx, 0, &img); err != nil {
		t.Fatal(err)
	}
	if got := appkittest.MustCall[pcache.LookupResponse](t, svc, "CacheLookup", 0, 0, pcache.LookupRequest{Key: "k"}); got.Value != "old" {
		t.Fatalf("after restoring an image with k=old, lookup = %+v", got)
	}
}

func TestMemoryBadInput(t *testing.T) {
	if _, err := pcache.Open(t.TempDir(), pcache.WithMemory(-1)); err == nil || !strings.Contains(err.Error(), "WithMemory(-1)") {
		t.Fatalf("WithMemory(-1): %v", err)
	}
	var c *neptune.Client // never reached: the key is checked first
	if _, err := pcache.Lookup(context.Background(), c, 0, ""); !errors.Is(err, pcache.ErrBadRequest) {
		t.Fatalf("Lookup with an empty key: %v", err)
	}
}
