// Package kv is a small partitioned key-value service for demos, benchmarks
// and the replication tests. Each partition is an independent map. New keeps
// it in memory; Open also stores it in pebble, so a replica survives a
// restart (what replication's recovery needs: a write's effect and its LSN
// are committed together, and Check reads the LSN back).
package kv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/internal/appkit"
)

// ErrNotFound is returned by get for a key that was never put; it is a
// neptune.ErrNotFound (the gateway answers 404).
var ErrNotFound error = &kindError{"kv: key not found", neptune.ErrNotFound}

// ErrBadRequest is returned for a malformed body; it is a
// neptune.ErrBadRequest (the gateway answers 400).
var ErrBadRequest error = &kindError{"kv: malformed request", neptune.ErrBadRequest}

// kindError is an error of the kind it unwraps to, with its own text.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// Store holds the partitions this node hosts. It is safe for concurrent use.
type Store struct {
	mu    sync.RWMutex
	parts map[int]map[string][]byte
	lsn   map[int]uint64 // per partition: the last replicated write applied
	db    *appkit.Pebble // nil: in memory only
}

// New returns an empty in-memory store. After a process restart its data is
// gone, so replicated deployments that restart nodes use Open.
func New() *Store { return &Store{parts: map[int]map[string][]byte{}, lsn: map[int]uint64{}} }

// Open returns a store persisted in dir, loading what it holds. Every write
// is synced with its LSN in one pebble batch.
func Open(dir string) (*Store, error) {
	store, err := appkit.OpenPebble(dir)
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	s := New()
	s.db = store
	db, err := store.DB()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kv: %w", err), store.Close())
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kv: %w", err), store.Close())
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) < 5 {
			continue
		}
		p := int(binary.BigEndian.Uint32(k[1:5]))
		switch k[0] {
		case 'l':
			s.lsn[p] = binary.BigEndian.Uint64(it.Value())
		case 'k':
			s.partition(p)[string(k[5:])] = bytes.Clone(it.Value())
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, errors.Join(fmt.Errorf("kv: load: %w", err), store.Close())
	}
	return s, nil
}

// Close closes the store's database, if any.
func (s *Store) Close() error {
	if s.db == nil {
		return nil
	}
	return s.db.Close()
}

func dbKey(kind byte, p int, key []byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte{kind}, uint32(p))
	return append(b, key...)
}

// Service returns the kv service backed by s. Methods:
//   - put (write): body "key=value"
//   - get (read): body "key"; returns the value
//   - len (read): number of keys in the partition, as decimal text
//   - digest (read): "keys=N lsn=L sha256=H" over the partition's sorted
//     contents, so replicas can be compared
//
// Check reports whether a replicated write's LSN was applied.
func (s *Store) Service() neptune.Service {
	return neptune.Service{
		Name: "kv",
		Methods: []neptune.Method{
			{Name: "put", Mode: neptune.Write, Handler: s.put},
			{Name: "get", Mode: neptune.Read, Handler: s.get},
			{Name: "len", Mode: neptune.Read, Handler: s.len},
			{Name: "digest", Mode: neptune.Read, Handler: s.digest},
		},
		Check:     s.Check,
		Snapshots: s,
	}
}

// Check is the CHECK callback: replicas apply writes in LSN order, so the
// write at lsn is applied iff lsn is at most the partition's recorded LSN.
func (s *Store) Check(_ context.Context, partition int, lsn uint64) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return lsn <= s.lsn[partition], nil
}

// partition returns p's map; callers hold s.mu for writing.
func (s *Store) partition(p int) map[string][]byte {
	m := s.parts[p]
	if m == nil {
		m = map[string][]byte{}
		s.parts[p] = m
	}
	return m
}

func (s *Store) put(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	k, v, ok := bytes.Cut(r.Body, []byte("="))
	if !ok || len(k) == 0 {
		return nil, fmt.Errorf("%w: put wants key=value, got %q", ErrBadRequest, r.Body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db != nil {
		db, err := s.db.DB()
		if err != nil {
			return nil, fmt.Errorf("kv: put: %w", err)
		}
		// Sized for the value: a batch grown by doubling costs a large
		// put about twice its size in garbage.
		b := db.NewBatchWithSize(batchCap(len(k) + len(v) + 128))
		_ = b.Set(dbKey('k', r.Partition, k), v, nil)
		if r.LSN != 0 {
			_ = b.Set(dbKey('l', r.Partition, nil), binary.BigEndian.AppendUint64(nil, r.LSN), nil)
		}
		err = s.db.Commit(b)
		_ = b.Close()
		if err != nil {
			return nil, fmt.Errorf("kv: put: %w", err)
		}
	}
	s.partition(r.Partition)[string(k)] = bytes.Clone(v)
	if r.LSN != 0 {
		s.lsn[r.Partition] = r.LSN
	}
	return &neptune.Response{}, nil
}

// batchCap is the capacity a pebble batch needs for size bytes of
// records (pebble rounds its first buffer up to a power of two from
// 1 KiB, reallocating a smaller one).
func batchCap(size int) int {
	n := 1 << 10
	for n < size {
		n *= 2
	}
	return n
}

func (s *Store) get(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	if len(r.Body) == 0 {
		return nil, fmt.Errorf("%w: get wants a key", ErrBadRequest)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.parts[r.Partition][string(r.Body)]
	if !ok {
		return nil, fmt.Errorf("%w: %q in partition %d", ErrNotFound, r.Body, r.Partition)
	}
	return &neptune.Response{Body: v}, nil
}

func (s *Store) len(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return &neptune.Response{Body: fmt.Appendf(nil, "%d", len(s.parts[r.Partition]))}, nil
}

func (s *Store) digest(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p := s.parts[r.Partition]
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write(strconv.AppendInt(nil, int64(len(k)), 10))
		h.Write([]byte(k))
		h.Write(strconv.AppendInt(nil, int64(len(p[k])), 10))
		h.Write(p[k])
	}
	return &neptune.Response{Body: fmt.Appendf(nil, "keys=%d lsn=%d sha256=%x", len(keys), s.lsn[r.Partition], h.Sum(nil)[:8]),
		Version: s.lsn[r.Partition]}, nil
}

// snapshotMagic starts a partition snapshot (format version 1): then the
// LSN it covers, then (key, value) records, each length-prefixed, keys in
// order; an empty key ends it, followed by the record count, so a cut-off
// stream is refused.
const snapshotMagic = "neptune-kv-snapshot-1\n"

// Snapshot implements neptune.Snapshotter: it writes partition's keys and
// the LSN of the last write they reflect. It takes a consistent view (a
// pebble snapshot, or a copy of the map's references; values are never
// changed in place) under the lock, then streams without holding writes.
func (s *Store) Snapshot(ctx context.Context, partition int, w io.Writer) (uint64, error) {
	s.mu.RLock()
	lsn := s.lsn[partition]
	var snap *pebble.Snapshot
	var mem map[string][]byte
	if s.db != nil {
		db, err := s.db.DB()
		if err != nil {
			s.mu.RUnlock()
			return 0, fmt.Errorf("kv: snapshot: %w", err)
		}
		snap = db.NewSnapshot()
	} else {
		mem = maps.Clone(s.parts[partition])
	}
	s.mu.RUnlock()
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(snapshotMagic); err != nil {
		return 0, fmt.Errorf("kv: snapshot: %w", err)
	}
	bw.Write(binary.AppendUvarint(nil, lsn))
	n := uint64(0)
	put := func(k, v []byte) error {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		n++
		var hdr []byte
		hdr = binary.AppendUvarint(hdr, uint64(len(k)))
		bw.Write(hdr)
		bw.Write(k)
		bw.Write(binary.AppendUvarint(nil, uint64(len(v))))
		_, err := bw.Write(v)
		return err
	}
	var err error
	if snap != nil {
		defer snap.Close()
		lo, hi := dbKey('k', partition, nil), dbKey('k', partition+1, nil)
		it, ierr := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if ierr != nil {
			return 0, fmt.Errorf("kv: snapshot: %w", ierr)
		}
		for it.First(); it.Valid() && err == nil; it.Next() {
			err = put(it.Key()[5:], it.Value())
		}
		err = errors.Join(err, it.Error(), it.Close())
	} else {
		for _, k := range slices.Sorted(maps.Keys(mem)) {
			if err = put([]byte(k), mem[k]); err != nil {
				break
			}
		}
	}
	if err != nil {
		return 0, fmt.Errorf("kv: snapshot: %w", err)
	}
	bw.Write(binary.AppendUvarint(nil, 0))
	bw.Write(binary.AppendUvarint(nil, n))
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("kv: snapshot: %w", err)
	}
	return lsn, nil
}

// Restore implements neptune.Snapshotter: it reads a whole snapshot
// first (kv keeps every partition in memory anyway), then replaces the
// partition's keys and LSN in one synced pebble batch and swaps the map,
// so a failed or cut-off restore changes nothing.
func (s *Store) Restore(ctx context.Context, partition int, r io.Reader) (uint64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapshotMagic {
		return 0, fmt.Errorf("%w: not a kv snapshot (%v)", ErrBadRequest, err)
	}
	lsn, err := binary.ReadUvarint(br)
	if err != nil {
		return 0, fmt.Errorf("kv: restore: %w", err)
	}
	m := map[string][]byte{}
	var b *pebble.Batch
	if s.db != nil {
		db, err := s.db.DB()
		if err != nil {
			return 0, fmt.Errorf("kv: restore: %w", err)
		}
		b = db.NewBatch()
		defer b.Close()
		if err := b.DeleteRange(dbKey('k', partition, nil), dbKey('k', partition+1, nil), nil); err != nil {
			return 0, fmt.Errorf("kv: restore: %w", err)
		}
	}
	readBytes := func() ([]byte, error) {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, err
		}
		if n > 1<<30 {
			return nil, fmt.Errorf("%w: record of %d bytes", ErrBadRequest, n)
		}
		v := make([]byte, n)
		_, err = io.ReadFull(br, v)
		return v, err
	}
	for {
		if len(m)%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		k, err := readBytes()
		if err != nil {
			return 0, fmt.Errorf("kv: restore: %w", err)
		}
		if len(k) == 0 {
			break
		}
		v, err := readBytes()
		if err != nil {
			return 0, fmt.Errorf("kv: restore: %w", err)
		}
		m[string(k)] = v
		if b != nil {
			if err := b.Set(dbKey('k', partition, k), v, nil); err != nil {
				return 0, fmt.Errorf("kv: restore: %w", err)
			}
		}
	}
	if n, err := binary.ReadUvarint(br); err != nil || n != uint64(len(m)) {
		return 0, fmt.Errorf("%w: kv snapshot cut off or corrupt (%d records, trailer %d, %v)", ErrBadRequest, len(m), n, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b != nil {
		lk := dbKey('l', partition, nil)
		if err := b.Set(lk, binary.BigEndian.AppendUint64(nil, lsn), nil); err != nil {
			return 0, fmt.Errorf("kv: restore: %w", err)
		}
		if err := s.db.Commit(b); err != nil {
			return 0, fmt.Errorf("kv: restore: %w", err)
		}
	}
	s.parts[partition] = m
	s.lsn[partition] = lsn
	return lsn, nil
}
