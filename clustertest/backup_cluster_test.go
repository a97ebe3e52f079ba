package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/auction"
	"github.com/neptune-cluster/neptune/apps/forum"
	"github.com/neptune-cluster/neptune/apps/pcache"
)

// backupWorkload is what a backup test writes and how it counts, after a
// restore, the copies of each write in the state.
type backupWorkload struct {
	service string
	// write i, with the idempotency key "w<i>" (the same i again is a
	// client's retry).
	write func(ctx context.Context, c *neptune.Client, i int) error
	// count returns how many times each write in 1..n is in the state.
	count func(ctx context.Context, c *neptune.Client, n int) (map[int]int, error)
	// postgres keeps the service's data in PostgreSQL (a schema per
	// node on NEPTUNE_TEST_PG_DSN), not in SQLite files.
	postgres bool
}

const backupParts = 3

// TestBackupRestoreListAppend: appends under load on three node
// processes (level 2, three partitions), `neptune backup` while they go
// on, more appends, the cluster killed and its data gone, three new nodes
// seeded by `neptune restore`: every append acknowledged before the
// backup began is there exactly once, none started after it ended is,
// and a client's retry of an acknowledged append (its idempotency key)
// after the restore is not applied again. A corrupted or truncated
// backup is refused before anything is written.
func TestBackupRestoreListAppend(t *testing.T) {
	keyOf := func(i int) string { return fmt.Sprintf("k%d", i%8) }
	testBackupRestore(t, "l", backupWorkload{
		service: "listappend",
		write: func(ctx context.Context, c *neptune.Client, i int) error {
			_, err := c.Call(ctx, "listappend", i%backupParts, "append", fmt.Appendf(nil, "%s=%d", keyOf(i), i),
				neptune.WithIdempotencyKey(fmt.Sprintf("w%d", i)))
			return err
		},
		count: func(ctx context.Context, c *neptune.Client, _ int) (map[int]int, error) {
			counts := map[int]int{}
			for p := range backupParts {
				for k := range 8 {
					resp, err := c.Call(ctx, "listappend", p, "read", []byte(keyOf(k)))
					if err != nil {
						return nil, err
					}
					for _, f := range strings.Fields(string(resp.Body)) {
						i, err := strconv.Atoi(f)
						if err != nil {
							return nil, fmt.Errorf("partition %d key %s: %q: %w", p, keyOf(k), resp.Body, err)
						}
						counts[i]++
					}
				}
			}
			return counts, nil
		},
	})
}

// TestBackupRestoreKV is TestBackupRestoreListAppend for kv (pebble).
func TestBackupRestoreKV(t *testing.T) {
	testBackupRestore(t, "v", backupWorkload{
		service: "kv",
		write: func(ctx context.Context, c *neptune.Client, i int) error {
			_, err := c.Call(ctx, "kv", i%backupParts, "put", fmt.Appendf(nil, "k%d=v%d", i, i), neptune.WithIdempotencyKey(fmt.Sprintf("w%d", i)))
			return err
		},
		count: func(ctx context.Context, c *neptune.Client, n int) (map[int]int, error) {
			counts := map[int]int{}
			for i := 1; i <= n; i++ {
				resp, err := c.Call(ctx, "kv", i%backupParts, "get", fmt.Appendf(nil, "k%d", i))
				switch {
				case errors.Is(err, neptune.ErrNotFound):
				case err != nil:
					return nil, err
				case string(resp.Body) != fmt.Sprintf("v%d", i):
					return nil, fmt.Errorf("k%d = %q, want v%d", i, resp.Body, i)
				default:
					counts[i] = 1
				}
			}
			return counts, nil
		},
	})
}

// TestBackupRestoreForum is TestBackupRestoreListAppend for the forum on
// SQLite: each write is a new thread whose subject names it.
func TestBackupRestoreForum(t *testing.T) { testBackupRestore(t, "f", forumWorkload()) }

// TestBackupRestoreForumPostgres is TestBackupRestoreForum with every
// node's forum in a PostgreSQL database of its own; the restored nodes
// get the lost nodes' databases back, holding the writes made after the
// backup, which the restore replaces.
func TestBackupRestoreForumPostgres(t *testing.T) {
	w := forumWorkload()
	w.postgres = true
	testBackupRestore(t, "fq", w)
}

// forumWorkload: each write is a new thread whose subject names it.
func forumWorkload() backupWorkload {
	return backupWorkload{
		service: "forum",
		write: func(ctx context.Context, c *neptune.Client, i int) error {
			p := i % backupParts
			body, _ := json.Marshal(forum.AddMsgRequest{Topic: fmt.Sprintf("t%d", p), Author: "backup", Subject: fmt.Sprintf("s%d", i)})
			_, err := c.Call(ctx, "forum", p, "AddMsg", body, neptune.WithIdempotencyKey(fmt.Sprintf("w%d", i)))
			return err
		},
		count: func(ctx context.Context, c *neptune.Client, _ int) (map[int]int, error) {
			counts := map[int]int{}
			for p := range backupParts {
				body, _ := json.Marshal(forum.ViewHeadersRequest{Topic: fmt.Sprintf("t%d", p)})
				resp, err := c.Call(ctx, "forum", p, "ViewHeaders", body)
				if err != nil {
					return nil, err
				}
				var v forum.ViewHeadersResponse
				if err := json.Unmarshal(resp.Body, &v); err != nil {
					return nil, err
				}
				for _, h := range v.Threads {
					i, err := strconv.Atoi(strings.TrimPrefix(h.Subject, "s"))
					if err != nil {
						return nil, fmt.Errorf("subject %q: %w", h.Subject, err)
					}
					counts[i]++
				}
			}
			return counts, nil
		},
	}
}

// TestBackupRestoreAuction is TestBackupRestoreListAppend for the
// auction on SQLite: each write is a new item whose title names it.
func TestBackupRestoreAuction(t *testing.T) { testBackupRestore(t, "u", auctionWorkload()) }

// TestBackupRestoreAuctionPostgres is TestBackupRestoreForumPostgres for
// the auction.
func TestBackupRestoreAuctionPostgres(t *testing.T) {
	w := auctionWorkload()
	w.postgres = true
	testBackupRestore(t, "uq", w)
}

// auctionWorkload: each write is a new item whose title names it.
func auctionWorkload() backupWorkload {
	return backupWorkload{
		service: "auction",
		write: func(ctx context.Context, c *neptune.Client, i int) error {
			p := i % backupParts
			body, _ := json.Marshal(auction.AddItemRequest{Category: fmt.Sprintf("c%d", p), Title: fmt.Sprintf("s%d", i), Seller: "backup", StartPrice: 1})
			_, err := c.Call(ctx, "auction", p, "AddItem", body, neptune.WithIdempotencyKey(fmt.Sprintf("w%d", i)))
			return err
		},
		count: func(ctx context.Context, c *neptune.Client, _ int) (map[int]int, error) {
			counts := map[int]int{}
			for p := range backupParts {
				body, _ := json.Marshal(auction.ViewCategoryRequest{Category: fmt.Sprintf("c%d", p)})
				resp, err := c.Call(ctx, "auction", p, "ViewCategory", body)
				if err != nil {
					return nil, err
				}
				var v auction.ViewCategoryResponse
				if err := json.Unmarshal(resp.Body, &v); err != nil {
					return nil, err
				}
				for _, it := range v.Items {
					i, err := strconv.Atoi(strings.TrimPrefix(it.Title, "s"))
					if err != nil {
						return nil, fmt.Errorf("title %q: %w", it.Title, err)
					}
					counts[i]++
				}
			}
			return counts, nil
		},
	}
}

// TestBackupRestorePCache is TestBackupRestoreKV for pcache (bbolt).
func TestBackupRestorePCache(t *testing.T) {
	testBackupRestore(t, "p", backupWorkload{
		service: "pcache",
		write: func(ctx context.Context, c *neptune.Client, i int) error {
			body, _ := json.Marshal(pcache.UpdateRequest{Key: fmt.Sprintf("k%d", i), Value: fmt.Sprintf("v%d", i)})
			_, err := c.Call(ctx, "pcache", i%backupParts, "CacheUpdate", body, neptune.WithIdempotencyKey(fmt.Sprintf("w%d", i)))
			return err
		},
		count: func(ctx context.Context, c *neptune.Client, n int) (map[int]int, error) {
			counts := map[int]int{}
			for i := 1; i <= n; i++ {
				body, _ := json.Marshal(pcache.LookupRequest{Key: fmt.Sprintf("k%d", i)})
				resp, err := c.Call(ctx, "pcache", i%backupParts, "CacheLookup", body)
				if err != nil {
					return nil, err
				}
				var v pcache.LookupResponse
				if err := json.Unmarshal(resp.Body, &v); err != nil {
					return nil, err
				}
				switch {
				case !v.Found:
				case v.Value != fmt.Sprintf("v%d", i):
					return nil, fmt.Errorf("k%d = %q, want v%d", i, v.Value, i)
				default:
					counts[i] = 1
				}
			}
			return counts, nil
		},
	})
}
