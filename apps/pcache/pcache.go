// Package pcache is the dissertation's persistent cache: CacheUpdate
// stores a value under a key, CacheLookup reads it back, each partition
// independent, all kept in one bbolt file per node.
//
// bbolt (already a dependency of the write log's benchmark) gives each
// update a durable, atomic transaction: the value and the partition's LSN
// are written in the same transaction, so after a crash CHECK reports
// exactly the updates that survived. A file per partition with atomic
// rename would rewrite the whole partition on every update.
package pcache

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/internal/appkit"
)

// ErrBadRequest is returned for a malformed body.
var ErrBadRequest = errors.New("pcache: malformed request")

// UpdateRequest is the body of CacheUpdate (write).
type UpdateRequest struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// UpdateResponse answers CacheUpdate; Replayed is true when the request's
// LSN had already been applied and nothing was written.
type UpdateResponse struct {
	Replayed bool `json:"replayed,omitempty"`
}

// LookupRequest is the body of CacheLookup (read).
type LookupRequest struct {
	Key string `json:"key"`
}

// LookupResponse answers CacheLookup. A miss is not an error: Found is
// false and Value empty.
type LookupResponse struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	Found bool   `json:"found"`
}

// lsnBucket maps a partition (8 bytes, big endian) to its last LSN;
// partition p's data lives in bucket "p<p>".
var lsnBucket = []byte("lsn")

// Cache is one node's cache file, with an optional in-memory tier
// (WithMemory). Safe for concurrent use.
type Cache struct {
	db  *bolt.DB
	mem memory
}

// Open opens (creating if needed) the cache file pcache.db in dir.
func Open(dir string, opts ...Option) (*Cache, error) {
	c := &Cache{mem: memory{index: map[string]*list.Element{}}}
	for _, o := range opts {
		o(c)
	}
	if c.mem.max < 0 {
		return nil, fmt.Errorf("pcache: WithMemory(%d): the number of entries must be >= 0", c.mem.max)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pcache: %w", err)
	}
	db, err := bolt.Open(filepath.Join(dir, "pcache.db"), 0o644, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("pcache: open %s: %w", dir, err)
	}
	c.db = db
	return c, nil
}

// Close closes the file.
func (c *Cache) Close() error { return c.db.Close() }

// Service returns the pcache service: CacheUpdate (write), CacheLookup
// (read), CHECK and snapshots of a partition (snapshot.go).
func (c *Cache) Service() neptune.Service {
	return neptune.Service{
		Name: "pcache",
		Methods: []neptune.Method{
			{Name: "CacheUpdate", Mode: neptune.Write, Handler: c.update},
			{Name: "CacheLookup", Mode: neptune.Read, Handler: c.lookup},
		},
		Check:     c.Check,
		Snapshots: c,
	}
}

func partKey(p int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(p)) }

func dataBucket(p int) []byte { return []byte("p" + strconv.Itoa(p)) }

func (c *Cache) update(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	var in UpdateRequest
	if err := appkit.Decode(ErrBadRequest, "CacheUpdate", r.Body, &in); err != nil {
		return nil, err
	}
	if in.Key == "" {
		return nil, fmt.Errorf("%w: CacheUpdate: key is empty", ErrBadRequest)
	}
	applied := false
	err := c.db.Update(func(tx *bolt.Tx) error {
		lsns, err := tx.CreateBucketIfNotExists(lsnBucket)
		if err != nil {
			return err
		}
		last := uint64(0)
		if v := lsns.Get(partKey(r.Partition)); v != nil {
			last = binary.BigEndian.Uint64(v)
		}
		if r.LSN != 0 && r.LSN <= last {
			return nil
		}
		data, err := tx.CreateBucketIfNotExists(dataBucket(r.Partition))
		if err != nil {
			return err
		}
		if err := data.Put([]byte(in.Key), []byte(in.Value)); err != nil {
			return err
		}
		if r.LSN != 0 {
			if err := lsns.Put(partKey(r.Partition), binary.BigEndian.AppendUint64(nil, r.LSN)); err != nil {
				return err
			}
		}
		applied = true
		return nil
	})
	if err != nil {
		if isIO(err) {
			// The store failed (a full disk): the update did not happen.
			return nil, fmt.Errorf("%w: pcache: CacheUpdate: %w", neptune.ErrStorage, err)
		}
		return nil, fmt.Errorf("pcache: CacheUpdate: %w", err)
	}
	if applied {
		c.mem.updated(r.Partition, in.Key, in.Value)
	}
	return &neptune.Response{Body: appkit.Encode(UpdateResponse{Replayed: !applied}), Version: r.LSN}, nil
}

func (c *Cache) lookup(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	var in LookupRequest
	if err := appkit.Decode(ErrBadRequest, "CacheLookup", r.Body, &in); err != nil {
		return nil, err
	}
	if in.Key == "" {
		return nil, fmt.Errorf("%w: CacheLookup: key is empty", ErrBadRequest)
	}
	out := LookupResponse{Key: in.Key}
	v, ok, gen := c.mem.get(r.Partition, in.Key)
	if ok {
		out.Value, out.Found = v, true
		return &neptune.Response{Body: appkit.Encode(out)}, nil
	}
	err := c.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(dataBucket(r.Partition)); b != nil {
			if v := b.Get([]byte(in.Key)); v != nil {
				out.Value, out.Found = string(v), true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pcache: CacheLookup: %w", err)
	}
	if out.Found {
		c.mem.fill(r.Partition, in.Key, out.Value, gen)
	}
	return &neptune.Response{Body: appkit.Encode(out)}, nil
}

// Check is the CHECK callback: was the update with lsn applied to
// partition?
func (c *Cache) Check(_ context.Context, partition int, lsn uint64) (bool, error) {
	last := uint64(0)
	err := c.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(lsnBucket); b != nil {
			if v := b.Get(partKey(partition)); v != nil {
				last = binary.BigEndian.Uint64(v)
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("pcache: CHECK: %w", err)
	}
	return lsn <= last, nil
}

// isIO reports whether err comes from the file system (bbolt's writes and
// syncs) rather than from the update itself.
func isIO(err error) bool {
	var pe *fs.PathError
	var errno syscall.Errno
	return errors.As(err, &pe) || errors.As(err, &errno)
}
