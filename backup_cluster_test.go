package neptune_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/auction"
	"github.com/neptune-cluster/neptune/apps/forum"
	"github.com/neptune-cluster/neptune/apps/pcache"
	"github.com/neptune-cluster/neptune/internal/replication"
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

// TestBackupRestoreForum is TestBackupRestoreListAppend for the forum on
// SQLite: each write is a new thread whose subject names it.
func TestBackupRestoreForum(t *testing.T) {
	testBackupRestore(t, "f", backupWorkload{
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
	})
}

// TestBackupRestoreAuction is TestBackupRestoreListAppend for the
// auction on SQLite: each write is a new item whose title names it.
func TestBackupRestoreAuction(t *testing.T) {
	testBackupRestore(t, "u", backupWorkload{
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
	})
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

func testBackupRestore(t *testing.T, prefix string, w backupWorkload) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	exe := neptuneBinary(t)
	cl, nodes, c := appProcs(t, ctx, prefix, w.service, backupParts, 2, "")
	neptuneCmd := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, exe, args...).CombinedOutput()
		return string(out), err
	}

	// Writers under load; each write's start and acknowledgement times.
	var (
		mu      sync.Mutex
		started = map[int]time.Time{}
		acked   = map[int]time.Time{}
		next    atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := int(next.Add(1))
				mu.Lock()
				started[i] = time.Now()
				mu.Unlock()
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := w.write(callCtx, c, i)
				cancel()
				if err == nil {
					mu.Lock()
					acked[i] = time.Now()
					mu.Unlock()
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)

	file := filepath.Join(t.TempDir(), w.service+".nbk")
	began := time.Now()
	out, err := neptuneCmd(append([]string{"backup", "--join", strings.Join(cl.Seeds(), ","), "--service", w.service, "--file", file},
		cl.SecurityArgs("operator/operator")...)...)
	ended := time.Now()
	t.Logf("neptune backup (%v):\n%s", ended.Sub(began).Round(time.Millisecond), out)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("neptune backup: %v", err)
	}
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()

	mu.Lock()
	var before, after int
	for i, at := range acked {
		if at.Before(began) {
			before++
		}
		if started[i].After(ended) {
			after++
		}
	}
	mu.Unlock()
	t.Logf("%d writes acknowledged before the backup began, %d started after it ended, %d in all", before, after, len(acked))
	if before < 50 || after < 10 {
		t.Fatalf("too little load to judge: %d before, %d after", before, after)
	}

	// A damaged backup is refused before anything is written.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damaged := map[string][]byte{
		"flipped":   append([]byte(nil), b...),
		"truncated": b[:len(b)-len(b)/3],
	}
	damaged["flipped"][len(b)-len(b)/4] ^= 0x40
	for name, bad := range damaged {
		path := filepath.Join(t.TempDir(), name+".nbk")
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		dd := filepath.Join(t.TempDir(), "data")
		out, err := neptuneCmd("restore", "--file", path, "--data-dir", dd)
		t.Logf("neptune restore of a %s backup: %v\n%s", name, err, out)
		if err == nil || !strings.Contains(out, "refused") || !strings.Contains(out, "backup file damaged") {
			t.Errorf("restore of a %s backup: err %v, output %q: want it refused as damaged", name, err, out)
		}
		if _, err := os.Stat(replication.RestoreFile(dd, w.service)); err == nil {
			t.Errorf("restore of a %s backup seeded %s", name, dd)
		}
	}

	// The cluster is lost: every node and its data.
	c.Close()
	for _, n := range nodes {
		n.Kill()
	}
	cl.Close()
	for _, n := range nodes {
		if err := os.RemoveAll(filepath.Join(filepath.Dir(n.LogPath), n.Spec.ID)); err != nil {
			t.Fatal(err)
		}
	}

	// A new cluster, seeded from the backup.
	_, _, c2 := seededProcs(t, ctx, prefix+"r", w.service, backupParts, 2, "", func(dataDir string) {
		out, err := neptuneCmd("restore", "--file", file, "--data-dir", dataDir)
		if err != nil {
			t.Fatalf("neptune restore: %v\n%s", err, out)
		}
		t.Logf("neptune restore --data-dir %s:\n%s", filepath.Base(dataDir), out)
	})
	counts, err := w.count(ctx, c2, int(next.Load()))
	if err != nil {
		t.Fatal(err)
	}
	var missing, doubled, later []int
	mu.Lock()
	for i, at := range acked {
		if at.Before(began) && counts[i] == 0 {
			missing = append(missing, i)
		}
	}
	for i, n := range counts {
		if n > 1 {
			doubled = append(doubled, i)
		}
		if started[i].After(ended) {
			later = append(later, i)
		}
	}
	mu.Unlock()
	t.Logf("restored: %d writes; %d acknowledged before the backup missing, %d doubled, %d started after it present", len(counts), len(missing), len(doubled), len(later))
	if len(missing) > 0 || len(doubled) > 0 || len(later) > 0 {
		t.Errorf("missing %v, doubled %v, from after the backup %v", head(missing), head(doubled), head(later))
	}

	// A client's retry of a write the backup holds is not applied again.
	var retried []int
	mu.Lock()
	for i, at := range acked {
		if at.Before(began) && len(retried) < 20 {
			retried = append(retried, i)
		}
	}
	mu.Unlock()
	for _, i := range retried {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := w.write(callCtx, c2, i)
		cancel()
		if err != nil {
			t.Fatalf("retry of write %d: %v", i, err)
		}
	}
	if counts, err = w.count(ctx, c2, int(next.Load())); err != nil {
		t.Fatal(err)
	}
	for _, i := range retried {
		if counts[i] != 1 {
			t.Errorf("write %d is in the state %d times after its retry, want once", i, counts[i])
		}
	}
}

// head is at most the first 10 of xs.
func head(xs []int) []int { return xs[:min(len(xs), 10)] }
