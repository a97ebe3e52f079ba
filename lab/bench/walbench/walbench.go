// Package walbench measures candidate stores for the replica write log side
// by side: synced appends of fixed-size entries, reads of a run of entries
// from an LSN, and prefix truncation. It chose the store behind package wal.
package walbench

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
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

// Main runs the comparison. It is meant to become `neptune bench wal`.
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("walbench", flag.ContinueOnError)
	fs.SetOutput(stdout)
	n := fs.Int("n", 2000, "entries to append")
	size := fs.Int("size", 1024, "entry size in bytes")
	batch := fs.Int("batch", 1, "entries per synced append")
	reads := fs.Int("read", 100, "entries per read-from-LSN")
	rounds := fs.Int("rounds", 3, "rounds; contenders alternate within each round")
	dir := fs.String("dir", "", "directory for the stores (default: a temp dir; use a real disk)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n <= 0 || *size <= 0 || *batch <= 0 || *reads <= 0 || *rounds <= 0 || *reads > *n {
		return errors.New("walbench: -n, -size, -batch, -read, -rounds must be positive and -read <= -n")
	}
	base := *dir
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
	val := make([]byte, *size)
	for i := range val {
		val[i] = byte(i * 7)
	}
	for round := range *rounds {
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
			for lsn := 1; lsn <= *n; lsn += *batch {
				vals := make([][]byte, min(*batch, *n-lsn+1))
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
			for from := 1; from+*reads-1 <= *n; from += *reads {
				if err := s.read(uint64(from), *reads, func(b []byte) { got += len(b) }); err != nil {
					return fmt.Errorf("walbench: %s read: %w", c.name, err)
				}
			}
			res[ci].readDur += time.Since(start)
			if want := (*n / *reads) * *reads * *size; got != want {
				return fmt.Errorf("walbench: %s read %d bytes, want %d", c.name, got, want)
			}
			start = time.Now()
			if err := s.truncate(uint64(*n / 2)); err != nil {
				return fmt.Errorf("walbench: %s truncate: %w", c.name, err)
			}
			res[ci].truncDur += time.Since(start)
			if err := s.close(); err != nil {
				return fmt.Errorf("walbench: %s close: %w", c.name, err)
			}
			os.RemoveAll(d)
		}
	}
	total := float64(*n * *rounds)
	fmt.Fprintf(stdout, "synced appends of %d B entries, %d per sync, %d entries x %d rounds; reads of %d entries from an LSN\n",
		*size, *batch, *n, *rounds, *reads)
	fmt.Fprintf(stdout, "%-12s %14s %10s %16s %10s %12s\n", "store", "appends/s", "vs pebble", "read entries/s", "vs pebble", "truncate")
	for ci, c := range contenders {
		a := total / res[ci].appendDur.Seconds()
		r := total / res[ci].readDur.Seconds()
		a0 := total / res[0].appendDur.Seconds()
		r0 := total / res[0].readDur.Seconds()
		fmt.Fprintf(stdout, "%-12s %14.0f %9.2fx %16.0f %9.2fx %12v\n", c.name, a, a/a0, r, r/r0,
			(res[ci].truncDur / time.Duration(*rounds)).Round(time.Microsecond))
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
