package pcache

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/neptune-cluster/neptune"
)

// Option adjusts Open.
type Option func(*Cache)

// WithMemory keeps up to entries recently read values in memory, the
// paper's in-memory tier ("CacheLookup can usually be fulfilled with
// in-memory data", USITS §5.4): a lookup it holds reads no file. Each
// node holds its own, so how often it hits depends on which keys reach
// the node: call through Lookup, whose affinity key keeps a key on one
// replica (the "affinity" balancing policy). 0, the default, keeps
// none; a negative count is an error.
func WithMemory(entries int) Option { return func(c *Cache) { c.mem.max = entries } }

// MemoryStats counts the lookups of a node's in-memory tier.
type MemoryStats struct {
	// Hits were answered from memory, Misses from the file.
	Hits, Misses uint64
}

// HitRatio is Hits over all lookups; 0 without any.
func (s MemoryStats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// MemoryStats returns the counts since Open or the last ResetMemory.
func (c *Cache) MemoryStats() MemoryStats {
	return MemoryStats{Hits: c.mem.hits.Load(), Misses: c.mem.misses.Load()}
}

// ResetMemory empties the in-memory tier and zeroes its counts, so an
// experiment can compare ways of calling from the same cold start.
func (c *Cache) ResetMemory() {
	c.mem.mu.Lock()
	defer c.mem.mu.Unlock()
	c.mem.gen++
	c.mem.order.Init()
	clear(c.mem.index)
	c.mem.hits.Store(0)
	c.mem.misses.Store(0)
}

// memory is a least-recently-used map from (partition, key) to value,
// filled by lookups that read the file. An update of a key it holds
// replaces the value, and a restored partition is dropped, so it never
// answers what the file no longer says; gen counts those changes, so a
// lookup that read the file while one happened does not fill the tier
// with what it read before.
type memory struct {
	max          int
	hits, misses atomic.Uint64
	mu           sync.Mutex
	gen          uint64
	order        list.List // of *memEntry, most recent first
	index        map[string]*list.Element
}

type memEntry struct {
	id        string
	partition int
	value     string
}

func memID(partition int, key string) string { return strconv.Itoa(partition) + "\x00" + key }

// get returns the value held for key, counting a hit or a miss; on a
// miss, gen is what fill wants after the file is read.
func (m *memory) get(partition int, key string) (value string, ok bool, gen uint64) {
	if m.max == 0 {
		return "", false, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.index[memID(partition, key)]
	if !ok {
		m.misses.Add(1)
		return "", false, m.gen
	}
	m.hits.Add(1)
	m.order.MoveToFront(e)
	return e.Value.(*memEntry).value, true, 0
}

// fill holds value, read from the file, for key unless the tier changed
// since get returned gen; past max it evicts the least recently used.
func (m *memory) fill(partition int, key, value string, gen uint64) {
	if m.max == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != m.gen {
		return
	}
	id := memID(partition, key)
	if e, ok := m.index[id]; ok {
		e.Value.(*memEntry).value = value
		m.order.MoveToFront(e)
		return
	}
	m.index[id] = m.order.PushFront(&memEntry{id: id, partition: partition, value: value})
	if m.order.Len() > m.max {
		last := m.order.Back()
		m.order.Remove(last)
		delete(m.index, last.Value.(*memEntry).id)
	}
}

// updated replaces the value held for key, if any: an update does not
// fill the tier (every replica applies it; only lookups show a key is
// wanted here).
func (m *memory) updated(partition int, key, value string) {
	if m.max == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	if e, ok := m.index[memID(partition, key)]; ok {
		e.Value.(*memEntry).value = value
	}
}

// drop forgets every entry of partition.
func (m *memory) drop(partition int) {
	if m.max == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	for e := m.order.Front(); e != nil; {
		next := e.Next()
		if me := e.Value.(*memEntry); me.partition == partition {
			m.order.Remove(e)
			delete(m.index, me.id)
		}
		e = next
	}
}

// Lookup reads key from partition of the pcache service through c, with
// the key as the call's affinity key (neptune.WithAffinity): under the
// "affinity" balancing policy each key stays on one replica, whose
// in-memory tier (WithMemory) then holds it.
func Lookup(ctx context.Context, c *neptune.Client, partition int, key string, opts ...neptune.CallOption) (LookupResponse, error) {
	var out LookupResponse
	err := call(ctx, c, partition, "CacheLookup", key, LookupRequest{Key: key}, &out, opts)
	return out, err
}

// Update stores value under key in partition through c, with the key as
// the affinity key, so that on a partition that is not replicated the
// value lands on the replica that answers the key's lookups.
func Update(ctx context.Context, c *neptune.Client, partition int, key, value string, opts ...neptune.CallOption) (UpdateResponse, error) {
	var out UpdateResponse
	err := call(ctx, c, partition, "CacheUpdate", key, UpdateRequest{Key: key, Value: value}, &out, opts)
	return out, err
}

func call(ctx context.Context, c *neptune.Client, partition int, method, key string, in, out any, opts []neptune.CallOption) error {
	if key == "" {
		return fmt.Errorf("%w: %s: key is empty", ErrBadRequest, method)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("pcache: %s: %w", method, err)
	}
	resp, err := c.Call(ctx, "pcache", partition, method, body, append([]neptune.CallOption{neptune.WithAffinity(key)}, opts...)...)
	if err != nil {
		return fmt.Errorf("pcache: %s: %w", method, err)
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return fmt.Errorf("pcache: %s: malformed answer: %w", method, err)
	}
	return nil
}
