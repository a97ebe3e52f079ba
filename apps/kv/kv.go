// Package kv is a small partitioned key-value service for demos, benchmarks
// and the replication tests. Each partition is an independent map. New keeps
// it in memory; Open also stores it in pebble, so a replica survives a
// restart (what replication's recovery needs: a write's effect and its LSN
// are committed together, and Check reads the LSN back).
package kv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble"

	"github.com/neptune-cluster/neptune"
)

// ErrNotFound is returned by get for a key that was never put.
var ErrNotFound = errors.New("kv: key not found")

// ErrBadRequest is returned for a malformed body.
var ErrBadRequest = errors.New("kv: malformed request")

// Store holds the partitions this node hosts. It is safe for concurrent use.
type Store struct {
	mu    sync.RWMutex
	parts map[int]map[string][]byte
	lsn   map[int]uint64 // per partition: the last replicated write applied
	db    *pebble.DB     // nil: in memory only
}

// New returns an empty in-memory store. After a process restart its data is
// gone, so replicated deployments that restart nodes use Open.
func New() *Store { return &Store{parts: map[int]map[string][]byte{}, lsn: map[int]uint64{}} }

// Open returns a store persisted in dir, loading what it holds. Every write
// is synced with its LSN in one pebble batch.
func Open(dir string) (*Store, error) {
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", dir, err)
	}
	s := New()
	s.db = db
	it, err := db.NewIter(nil)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kv: %w", err), db.Close())
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
		return nil, errors.Join(fmt.Errorf("kv: load: %w", err), db.Close())
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
		Check: s.Check,
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
		b := s.db.NewBatch()
		_ = b.Set(dbKey('k', r.Partition, k), v, nil)
		if r.LSN != 0 {
			_ = b.Set(dbKey('l', r.Partition, nil), binary.BigEndian.AppendUint64(nil, r.LSN), nil)
		}
		err := b.Commit(pebble.Sync)
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
