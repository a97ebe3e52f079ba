package replication_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/auction"
	"github.com/neptune-cluster/neptune/apps/forum"
	"github.com/neptune-cluster/neptune/apps/pcache"
	"github.com/neptune-cluster/neptune/internal/replication"
	"github.com/neptune-cluster/neptune/internal/service"
)

// appStore runs a real app's service as a memCluster node's store.
type appStore struct {
	neptune.Snapshotter
	svc    neptune.Service
	digest func() string
}

func (s appStore) Execute(ctx context.Context, req *service.Request) (replication.Result, error) {
	for _, m := range s.svc.Methods {
		if m.Name == req.Method {
			resp, err := m.Handler(ctx, req)
			return replication.Result{Resp: resp, Err: err}, nil
		}
	}
	return replication.Result{}, replication.ErrNoHandler
}

func (s appStore) Check(ctx context.Context, part int, lsn uint64) (bool, error) {
	return s.svc.Check(ctx, part, lsn)
}

func (s appStore) Digest() string { return s.digest() }

// call runs a read method of svc on partition 0.
func call(t *testing.T, svc neptune.Service, method string, body string) string {
	for _, m := range svc.Methods {
		if m.Name == method {
			resp, err := m.Handler(context.Background(), &neptune.Request{Service: svc.Name, Method: method, Mode: neptune.Read, Body: []byte(body)})
			if err != nil {
				t.Errorf("%s: %v", method, err)
				return ""
			}
			return string(resp.Body)
		}
	}
	t.Fatalf("no method %s", method)
	return ""
}

// TestWipedAppReplicaIsRestoredBySnapshotOnNodes is
// TestWipedReplicaIsRestoredBySnapshotOnNodes on real storage: the
// forum and the auction on SQLite, and pcache on bbolt. Node c loses its data directory
// and its database after the primary truncated the log; the primary
// streams a snapshot of its service (a read transaction, taken while
// the loop goes on), c restores it into a fresh database and catches up
// from the log; its copy is then the primary's, and stays so across a
// restart without another snapshot.
func TestWipedAppReplicaIsRestoredBySnapshotOnNodes(t *testing.T) {
	for _, app := range []struct {
		name     string
		newStore func(t *testing.T) replication.TestStore
		method   string
		body     func(i, size int) []byte
	}{
		{"forum-sqlite", func(t *testing.T) replication.TestStore {
			f, err := forum.Open(context.Background(), filepath.Join(t.TempDir(), "forum.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			svc := f.Service()
			return wrap(svc, func() string { return call(t, svc, "Digest", "{}") })
		}, "AddMsg", func(i, size int) []byte {
			b, _ := json.Marshal(forum.AddMsgRequest{Topic: fmt.Sprintf("t%d", i%3), Author: "ann", Subject: fmt.Sprintf("s%d", i), Body: strings.Repeat("x", size)})
			return b
		}},
		{"forum-postgres", func(t *testing.T) replication.TestStore {
			f, err := forum.Open(context.Background(), pgSchema(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			svc := f.Service()
			return wrap(svc, func() string { return call(t, svc, "Digest", "{}") })
		}, "AddMsg", func(i, size int) []byte {
			b, _ := json.Marshal(forum.AddMsgRequest{Topic: fmt.Sprintf("t%d", i%3), Author: "ann", Subject: fmt.Sprintf("s%d", i), Body: strings.Repeat("x", size)})
			return b
		}},
		{"auction-sqlite", func(t *testing.T) replication.TestStore {
			a, err := auction.Open(context.Background(), filepath.Join(t.TempDir(), "auction.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			svc := a.Service()
			return wrap(svc, func() string { return image(t, svc) })
		}, "AddItem", func(i, size int) []byte {
			b, _ := json.Marshal(auction.AddItemRequest{Category: fmt.Sprintf("c%d", i%3), Title: strings.Repeat("t", size), Seller: "sam", StartPrice: int64(i + 1)})
			return b
		}},
		{"pcache-bbolt", func(t *testing.T) replication.TestStore {
			c, err := pcache.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			svc := c.Service()
			return wrap(svc, func() string {
				var b strings.Builder
				for i := range 50 {
					b.WriteString(call(t, svc, "CacheLookup", fmt.Sprintf(`{"key":"k%d"}`, i)))
				}
				return b.String()
			})
		}, "CacheUpdate", func(i, size int) []byte {
			b, _ := json.Marshal(pcache.UpdateRequest{Key: fmt.Sprintf("k%d", i%50), Value: fmt.Sprintf("%d:%s", i, strings.Repeat("v", size))})
			return b
		}},
	} {
		t.Run(app.name, func(t *testing.T) {
			if strings.HasSuffix(app.name, "postgres") {
				pgSchema(t) // skips (or fails under CI) without a server
			}
			c := replication.NewMemCluster(t, func() replication.TestStore { return app.newStore(t) }, app.method, app.body)
			c.Advance(time.Second)
			if c.Primary() != "a" {
				t.Fatalf("primary %q, want a", c.Primary())
			}
			c.Write(0, 30, 30<<10)
			c.Advance(500 * time.Millisecond)
			if first := c.LogFirst("a"); first <= 1 {
				t.Fatalf("primary's log starts at %d: not truncated", first)
			}
			c.Wipe("c")
			c.Advance(2 * time.Second)
			c.Write(30, 5, 100)
			c.Advance(time.Second)
			if got, want := c.Store("c").Digest(), c.Store("a").Digest(); got != want || !c.Serving("c") || c.Installed() == 0 {
				t.Fatalf("wiped c (serving %v, %d snapshots installed):\n%.300s\nprimary a:\n%.300s", c.Serving("c"), c.Installed(), got, want)
			}
			n := c.Installed()
			c.Stop("c")
			c.Start("c")
			c.Advance(time.Second)
			c.Write(35, 5, 100)
			c.Advance(time.Second)
			if got, want := c.Store("c").Digest(), c.Store("a").Digest(); got != want {
				t.Fatalf("c after a restart:\n%.300s\nprimary a:\n%.300s", got, want)
			}
			if c.Installed() != n {
				t.Fatalf("%d more snapshots after the restart", c.Installed()-n)
			}
		})
	}
}

// pgSchema is a DSN naming a fresh schema on the PostgreSQL server of
// NEPTUNE_TEST_PG_DSN, dropped at t's end; without the variable the test
// is skipped, or fails when CI is set (as apps/internal/appkit/appkittest
// does: CI must run the PostgreSQL tests).
func pgSchema(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("NEPTUNE_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("NEPTUNE_TEST_PG_DSN is not set but CI is: the PostgreSQL tests must run in CI")
		}
		t.Skip("PostgreSQL tests skipped: set NEPTUNE_TEST_PG_DSN to run them")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	schema := fmt.Sprintf("rs_%d_%d", os.Getpid(), pgSeq.Add(1))
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if db, err := sql.Open("pgx", dsn); err == nil {
			_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
			db.Close()
		}
	})
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	if !strings.Contains(dsn, "://") {
		return dsn + " search_path=" + schema
	}
	return dsn + sep + "search_path=" + schema
}

var pgSeq atomic.Int64

// image digests a store by its partition 0's snapshot image (rows in
// key order and the LSN: equal images, equal copies).
func image(t *testing.T, svc neptune.Service) string {
	var b bytes.Buffer
	if _, err := svc.Snapshots.Snapshot(context.Background(), 0, &b); err != nil {
		t.Errorf("image: %v", err)
	}
	return fmt.Sprintf("%d bytes %x", b.Len(), sha256.Sum256(b.Bytes()))
}

// wrap makes svc a TestStore that digests with digest.
func wrap(svc neptune.Service, digest func() string) replication.TestStore {
	return appStore{Snapshotter: svc.Snapshots, svc: svc, digest: digest}
}
