// Package appkittest gives the SQL-backed services' tests their databases:
// a fresh SQLite file always, and a fresh PostgreSQL schema when
// NEPTUNE_TEST_PG_DSN names a server.
package appkittest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// EnvDSN names the PostgreSQL server the tests use.
const EnvDSN = "NEPTUNE_TEST_PG_DSN"

// Backend is one database a test runs against.
type Backend struct {
	Name string
	// DSN opens a fresh, empty database: an SQLite file or a PostgreSQL
	// schema that t's cleanup drops.
	DSN func(t *testing.T) string
}

// Backends returns SQLite and, if configured, PostgreSQL. Without
// NEPTUNE_TEST_PG_DSN, PostgreSQL is skipped with a message locally but
// fails the test when CI is set: CI must run the PostgreSQL tests for real.
func Backends() []Backend {
	return []Backend{
		{Name: "sqlite", DSN: func(t *testing.T) string { return filepath.Join(t.TempDir(), "db.sqlite") }},
		{Name: "postgres", DSN: postgresSchema},
	}
}

var seq atomic.Int64

func postgresSchema(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set but CI is: the PostgreSQL tests must run in CI (.ci/run starts a server)", EnvDSN)
		}
		t.Skipf("PostgreSQL tests skipped: set %s (e.g. postgres://neptune:neptune@127.0.0.1:5432/neptune) to run them", EnvDSN)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("%s: %v", EnvDSN, err)
	}
	defer db.Close()
	schema := fmt.Sprintf("t_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, seq.Add(1))
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema on %s: %v", EnvDSN, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
	})
	if strings.Contains(dsn, "://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "search_path=" + schema
	}
	return dsn + " search_path=" + schema
}
