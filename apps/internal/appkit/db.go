// Package appkit is the storage shell shared by the SQL-backed demo
// services (forum, auction): one DSN picks SQLite or PostgreSQL, each write
// runs in a transaction that also records the write's LSN, and CHECK reads
// that LSN back. It also decodes JSON request bodies strictly.
package appkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"sync"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" database/sql driver
	_ "modernc.org/sqlite"             // "sqlite" database/sql driver, pure Go

	"github.com/neptune-cluster/neptune"
)

// ErrLSN is returned for an LSN the store cannot represent.
var ErrLSN = errors.New("appkit: LSN out of range")

// DB is a service's database plus the name of its LSN table. Safe for
// concurrent use.
type DB struct {
	*sql.DB
	// Driver is "sqlite" or "pgx".
	Driver   string
	lsnTable string
	// sqliteWrite queues SQLite writers in-process: SQLite admits one
	// writer anyway, and its busy handler's sleeps would add tens of
	// milliseconds to the tail.
	sqliteWrite sync.Mutex
}

// Open opens the database named by dsn and creates the schema: the
// statements in schema (which must use IF NOT EXISTS) and the LSN table
// lsnTable(part, lsn).
//
// A dsn starting with postgres:// or postgresql://, or of the key=value
// form ("host=... dbname=..."), is PostgreSQL through pgx; "" is a private
// in-memory SQLite database; anything else is an SQLite file path. SQLite
// runs in WAL mode with synchronous=FULL, so an acknowledged write survives
// a crash of the machine, as it does on PostgreSQL's defaults.
func Open(ctx context.Context, dsn, lsnTable string, schema []string) (*DB, error) {
	db := &DB{lsnTable: lsnTable}
	var err error
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"), strings.Contains(dsn, "dbname="), strings.Contains(dsn, "host="):
		db.Driver = "pgx"
		db.DB, err = sql.Open("pgx", dsn)
	case dsn == "":
		db.Driver = "sqlite"
		db.DB, err = sql.Open("sqlite", "file::memory:?_txlock=immediate")
		if err == nil {
			db.SetMaxOpenConns(1) // each connection would see its own empty database
		}
	default:
		db.Driver = "sqlite"
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		// _txlock=immediate takes the write lock at BEGIN, so two writers
		// wait on busy_timeout instead of failing to upgrade a read lock.
		db.DB, err = sql.Open("sqlite", dsn+sep+"_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	}
	if err != nil {
		return nil, fmt.Errorf("appkit: open: %w", err)
	}
	stmts := append(slicesClone(schema), fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (part INTEGER PRIMARY KEY, lsn BIGINT NOT NULL)`, lsnTable))
	if err := db.migrate(ctx, stmts); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// migrate runs the schema in one transaction. On PostgreSQL it holds an
// advisory lock keyed by the LSN table, because concurrent CREATE TABLE IF
// NOT EXISTS from several nodes sharing a server can fail.
func (db *DB) migrate(ctx context.Context, stmts []string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("appkit: schema: %w", err)
	}
	defer tx.Rollback()
	if db.Driver == "pgx" {
		h := fnv.New64a()
		h.Write([]byte(db.lsnTable))
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err != nil {
			return fmt.Errorf("appkit: schema lock: %w", err)
		}
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("appkit: schema %q: %w", s, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("appkit: schema: %w", err)
	}
	return nil
}

// isStorage reports whether err comes from the database's storage rather
// than from the statement (see Write).
func isStorage(err error) bool {
	var lite interface{ Code() int }
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff {
		case 10, 11, 13, 14, 26: // SQLITE_IOERR, CORRUPT, FULL, CANTOPEN, NOTADB
			return true
		}
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		switch st := pg.SQLState(); {
		case strings.HasPrefix(st, "53"), strings.HasPrefix(st, "58"), strings.HasPrefix(st, "XX"):
			return true
		}
	}
	return false
}

// Write runs fn in a transaction that also records lsn as partition's last
// applied write, so the data and the LSN commit or vanish together.
//
// Writes to one partition are serialized (a row lock on its LSN row), which
// keeps ids computed inside fn, such as MAX(id)+1, deterministic: replicas
// that apply the same writes in LSN order compute the same ids. A non-zero
// lsn at or below the last applied one is a replay: fn is skipped and
// applied is false. lsn 0 (no replication) always applies and leaves the
// recorded LSN alone. An error from fn rolls everything back.
//
// An error that comes from the database's storage (a full disk, an I/O
// error, a damaged file: SQLite's FULL, IOERR, CORRUPT, CANTOPEN, NOTADB;
// PostgreSQL's classes 53, 58 and XX) wraps neptune.ErrStorage: the write
// did not take effect, and a replicated partition runs it again later.
func (db *DB) Write(ctx context.Context, partition int, lsn uint64, fn func(tx *sql.Tx) error) (applied bool, err error) {
	defer func() {
		if err != nil && isStorage(err) && !errors.Is(err, neptune.ErrStorage) {
			err = fmt.Errorf("%w: %w", neptune.ErrStorage, err)
		}
	}()
	if lsn > math.MaxInt64 {
		return false, fmt.Errorf("%w: %d", ErrLSN, lsn)
	}
	if db.Driver == "sqlite" {
		db.sqliteWrite.Lock()
		defer db.sqliteWrite.Unlock()
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("appkit: begin: %w", err)
	}
	defer tx.Rollback()
	var last int64
	// The no-op DO UPDATE locks the row on PostgreSQL; SQLite's
	// _txlock=immediate already serializes all writers.
	q := fmt.Sprintf(`INSERT INTO %[1]s (part, lsn) VALUES ($1, 0) ON CONFLICT (part) DO UPDATE SET lsn = %[1]s.lsn RETURNING lsn`, db.lsnTable)
	if err := tx.QueryRowContext(ctx, q, partition).Scan(&last); err != nil {
		return false, fmt.Errorf("appkit: read LSN: %w", err)
	}
	if lsn != 0 && lsn <= uint64(last) {
		return false, nil
	}
	if err := fn(tx); err != nil {
		return false, err
	}
	if lsn != 0 {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET lsn = $1 WHERE part = $2`, db.lsnTable), int64(lsn), partition); err != nil {
			return false, fmt.Errorf("appkit: record LSN: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("appkit: commit: %w", err)
	}
	return true, nil
}

// LastLSN is the LSN of the last write applied to partition (0 if none).
func (db *DB) LastLSN(ctx context.Context, partition int) (uint64, error) {
	var last int64
	err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT lsn FROM %s WHERE part = $1`, db.lsnTable), partition).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("appkit: read LSN: %w", err)
	}
	return uint64(last), nil
}

// Check is the service's CHECK callback: was the write with lsn applied?
func (db *DB) Check(ctx context.Context, partition int, lsn uint64) (bool, error) {
	last, err := db.LastLSN(ctx, partition)
	if err != nil {
		return false, err
	}
	return lsn <= last, nil
}
