package clustertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune"
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
