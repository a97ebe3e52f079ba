// Package kv is a small partitioned in-memory key-value service for demos
// and benchmarks. Each partition is an independent map.
package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/neptune-cluster/neptune"
)

// ErrNotFound is returned by get for a key that was never put.
var ErrNotFound = errors.New("kv: key not found")

// ErrBadRequest is returned for a malformed body.
var ErrBadRequest = errors.New("kv: malformed request")

// Store holds the partitions this node hosts.
type Store struct {
	mu    sync.RWMutex
	parts map[int]map[string][]byte
}

// New returns an empty store.
func New() *Store { return &Store{parts: map[int]map[string][]byte{}} }

// Service returns the kv service backed by s. Methods:
//   - put (write): body "key=value"
//   - get (read): body "key"; returns the value
//   - len (read): number of keys in the partition, as decimal text
func (s *Store) Service() neptune.Service {
	return neptune.Service{
		Name: "kv",
		Methods: []neptune.Method{
			{Name: "put", Mode: neptune.Write, Handler: s.put},
			{Name: "get", Mode: neptune.Read, Handler: s.get},
			{Name: "len", Mode: neptune.Read, Handler: s.len},
		},
	}
}

func (s *Store) put(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	k, v, ok := bytes.Cut(r.Body, []byte("="))
	if !ok || len(k) == 0 {
		return nil, fmt.Errorf("%w: put wants key=value, got %q", ErrBadRequest, r.Body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[r.Partition]
	if p == nil {
		p = map[string][]byte{}
		s.parts[r.Partition] = p
	}
	p[string(k)] = bytes.Clone(v)
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
