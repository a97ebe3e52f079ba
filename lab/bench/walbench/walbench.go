// Package walbench measures candidate stores for the replica write log side
// by side: synced appends of fixed-size entries, reads of a run of entries
// from an LSN, and prefix truncation. It chose the store behind package wal.
package walbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble"
	twal "github.com/tidwall/wal"
	bolt "go.etcd.io/bbolt"
)

// store is the part of a log store the write log needs.
type store interface {
	// append writes entries first..first+len(vals)-1 in one durable batch.
	append(first uint64, vals [][]byte, sync bool) error
	// read calls fn for n entries from lsn on.
	read(lsn uint64, n int, fn func([]byte)) error
	// truncate drops entries up to upTo.
	truncate(upTo uint64) error
	close() error
}

type opener struct {
	name string
	open func(dir string) (store, error)
}

var contenders = []opener{
	{"pebble", openPebble},
	{"bbolt", openBolt},
	{"tidwall/wal", openTidwall},
}

// Config are the knobs of `neptune bench wal`.
type Config struct {
	// Entries are appended per contender per round.
	Entries int
	// Size is an entry's size in bytes.
	Size int
	// Batch entries are appended per synced append.
	Batch int
	// Read entries are read per read-from-LSN.
	Read int
	// Rounds are interleaved: contenders alternate within each round.
	Rounds int
	// Dir holds the stores (default: a temporary directory; use a real
	// disk).
	Dir string
}

// DefaultConfig is 2000 synced appends of 1 KiB, reads of 100, 3 rounds.
func DefaultConfig() Config { return Config{Entries: 2000, Size: 1024, Batch: 1, Read: 100, Rounds: 3} }

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Entries <= 0 || c.Size <= 0 || c.Batch <= 0 || c.Read <= 0 || c.Rounds <= 0 || c.Read > c.Entries {
		return errors.New("walbench: entries, size, batch, read and rounds must be positive and read <= entries")
	}
	return nil
}

// Run is `neptune bench wal`: the candidate stores side by side.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	base := cfg.Dir
	if base == "" {
		d, err := os.MkdirTemp("", "walbench")
		if err != nil {
			return fmt.Errorf("walbench: %w", err)
		}
		defer os.RemoveAll(d)
		base = d
	}
	type result struct{ appendDur, readDur, truncDur time.Duration }
	res := make([]result, len(contenders))
	val := make([]byte, cfg.Size)
	for i := range val {
		val[i] = byte(i * 7)
	}
	for round := range cfg.Rounds {
		for ci, c := range contenders {
			if err := ctx.Err(); err != nil {
				return err
			}
			d := filepath.Join(base, fmt.Sprintf("%d-%d", round, ci))
			s, err := c.open(d)
			if err != nil {
				return fmt.Errorf("walbench: open %s: %w", c.name, err)
			}
			start := time.Now()
			for lsn := 1; lsn <= cfg.Entries; lsn += cfg.Batch {
				vals := make([][]byte, min(cfg.Batch, cfg.Entries-lsn+1))
				for i := range vals {
					vals[i] = val
				}
				if err := s.append(uint64(lsn), vals, true); err != nil {
					return fmt.Errorf("walbench: %s append: %w", c.name, err)
				}
			}
			res[ci].appendDur += time.Since(start)
			start = time.Now()
			got := 0
			for from := 1; from+cfg.Read-1 <= cfg.Entries; from += cfg.Read {
				if err := s.read(uint64(from), cfg.Read, func(b []byte) { got += len(b) }); err != nil {
					return fmt.Errorf("walbench: %s read: %w", c.name, err)
				}
			}
			res[ci].readDur += time.Since(start)
			if want := (cfg.Entries / cfg.Read) * cfg.Read * cfg.Size; got != want {
				return fmt.Errorf("walbench: %s read %d bytes, want %d", c.name, got, want)
			}
			start = time.Now()
			if err := s.truncate(uint64(cfg.Entries / 2)); err != nil {
				return fmt.Errorf("walbench: %s truncate: %w", c.name, err)
			}
			res[ci].truncDur += time.Since(start)
			if err := s.close(); err != nil {
				return fmt.Errorf("walbench: %s close: %w", c.name, err)
			}
			os.RemoveAll(d)
		}
	}
	total := float64(cfg.Entries * cfg.Rounds)
	fmt.Fprintf(stdout, "synced appends of %d B entries, %d per sync, %d entries x %d rounds; reads of %d entries from an LSN\n",
		cfg.Size, cfg.Batch, cfg.Entries, cfg.Rounds, cfg.Read)
	fmt.Fprintf(stdout, "%-12s %14s %10s %16s %10s %12s\n", "store", "appends/s", "vs pebble", "read entries/s", "vs pebble", "truncate")
	for ci, c := range contenders {
		a := total / res[ci].appendDur.Seconds()
		r := total / res[ci].readDur.Seconds()
		a0 := total / res[0].appendDur.Seconds()
		r0 := total / res[0].readDur.Seconds()
		fmt.Fprintf(stdout, "%-12s %14.0f %9.2fx %16.0f %9.2fx %12v\n", c.name, a, a/a0, r, r/r0,
			(res[ci].truncDur / time.Duration(cfg.Rounds)).Round(time.Microsecond))
	}
	return nil
}

func key(lsn uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'e'}, lsn) }

type pebbleStore struct{ db *pebble.DB }

func openPebble(dir string) (store, error) {
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		return nil, err
	}
	return &pebbleStore{db}, nil
}

func (p *pebbleStore) append(first uint64, vals [][]byte, sync bool) error {
	b := p.db.NewBatch()
	for i, v := range vals {
		if err := b.Set(key(first+uint64(i)), v, nil); err != nil {
			return err
		}
	}
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	return b.Commit(opt)
}

func (p *pebbleStore) read(lsn uint64, n int, fn func([]byte)) error {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: key(lsn), UpperBound: key(lsn + uint64(n))})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		fn(it.Value())
	}
	return errors.Join(it.Error(), it.Close())
}

func (p *pebbleStore) truncate(upTo uint64) error {
	return p.db.DeleteRange(key(0), key(upTo+1), pebble.Sync)
}

func (p *pebbleStore) close() error { return p.db.Close() }

type boltStore struct{ db *bolt.DB }

var boltBucket = []byte("log")

func openBolt(dir string) (store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, "log.db"), 0o644, nil)
	if err != nil {
		return nil, err
	}
	return &boltStore{db}, db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	})
}

func (s *boltStore) append(first uint64, vals [][]byte, sync bool) error {
	s.db.NoSync = !sync
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		for i, v := range vals {
			if err := b.Put(key(first+uint64(i)), v); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) read(lsn uint64, n int, fn func([]byte)) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltBucket).Cursor()
		for k, v := c.Seek(key(lsn)); k != nil && n > 0; k, v = c.Next() {
			fn(v)
			n--
		}
		return nil
	})
}

func (s *boltStore) truncate(upTo uint64) error {
	s.db.NoSync = false
	return s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltBucket).Cursor()
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k[1:]) <= upTo; k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) close() error { return s.db.Close() }

type tidwallStore struct {
	l    *twal.Log
	sync bool
}

func openTidwall(dir string) (store, error) {
	opts := *twal.DefaultOptions
	opts.NoSync = true // we sync explicitly per append
	l, err := twal.Open(dir, &opts)
	if err != nil {
		return nil, err
	}
	return &tidwallStore{l: l}, nil
}

func (t *tidwallStore) append(first uint64, vals [][]byte, sync bool) error {
	var b twal.Batch
	for i, v := range vals {
		b.Write(first+uint64(i), v)
	}
	if err := t.l.WriteBatch(&b); err != nil {
		return err
	}
	if sync {
		return t.l.Sync()
	}
	return nil
}

func (t *tidwallStore) read(lsn uint64, n int, fn func([]byte)) error {
	for i := range uint64(n) {
		v, err := t.l.Read(lsn + i)
		if err != nil {
			return err
		}
		fn(v)
	}
	return nil
}

func (t *tidwallStore) truncate(upTo uint64) error { return t.l.TruncateFront(upTo + 1) }

func (t *tidwallStore) close() error { return t.l.Close() }
