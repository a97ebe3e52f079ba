package listappend

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"

	"github.com/neptune-cluster/neptune/apps/internal/appkit"
)

// On-disk layout (all integers big-endian, so pebble's byte order is the
// order the loader needs):
//
//	formatKey                                  -> formatVersion
//	'l' partition(u32)                         -> lsn(u64)
//	'e' partition(u32) keylen(u16) key idx(u64) -> element(u64)
//
// One record per element makes an append a constant-size write however
// long the list, and the index in the key lets Open verify that no element
// is missing.
var (
	formatKey     = []byte("\x00listappend-format")
	formatVersion = []byte("1")
)

const (
	kindLSN  = 'l'
	kindElem = 'e'
)

// Open returns a store persisted in dir, loading what it holds. It refuses
// a directory written by something else (another service's pebble store
// opened by mistake would otherwise read as an empty or garbled state).
func Open(dir string) (*Store, error) {
	store, err := appkit.OpenPebble(dir)
	if err != nil {
		return nil, fmt.Errorf("listappend: %w", err)
	}
	s := New()
	s.db = store
	if err := s.load(); err != nil {
		return nil, errors.Join(fmt.Errorf("listappend: open %s: %w", dir, err), store.Close())
	}
	return s, nil
}

// load checks the format marker (writing it into an empty directory) and
// reads every partition into memory.
func (s *Store) load() error {
	db, err := s.db.DB()
	if err != nil {
		return err
	}
	v, closer, err := db.Get(formatKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if empty, err := isEmpty(db); err != nil {
			return err
		} else if !empty {
			return fmt.Errorf("%w: the directory holds data but no list-append format marker", errCorrupt)
		}
		if err := db.Set(formatKey, formatVersion, pebble.Sync); err != nil {
			return fmt.Errorf("write format marker: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read format marker: %w", err)
	}
	ok := bytes.Equal(v, formatVersion)
	found := string(v)
	if err := closer.Close(); err != nil {
		return fmt.Errorf("read format marker: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: format %q, this build reads %q", errCorrupt, found, formatVersion)
	}

	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if bytes.Equal(it.Key(), formatKey) {
			continue
		}
		if err := s.loadRecord(it.Key(), it.Value()); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

func isEmpty(db *pebble.DB) (bool, error) {
	it, err := db.NewIter(nil)
	if err != nil {
		return false, err
	}
	empty := !it.First()
	return empty, errors.Join(it.Error(), it.Close())
}

// loadRecord adds one stored record to memory. Records arrive in key
// order, so a list's elements arrive by index and a gap means data loss.
func (s *Store) loadRecord(k, v []byte) error {
	if len(k) < 5 || len(v) != 8 {
		return fmt.Errorf("%w: record %x (value of %d bytes)", errCorrupt, k, len(v))
	}
	p := s.part(int(binary.BigEndian.Uint32(k[1:5])))
	switch k[0] {
	case kindLSN:
		if len(k) != 5 {
			return fmt.Errorf("%w: LSN record %x", errCorrupt, k)
		}
		p.lsn = binary.BigEndian.Uint64(v)
	case kindElem:
		if len(k) < 7 {
			return fmt.Errorf("%w: element record %x", errCorrupt, k)
		}
		n := int(binary.BigEndian.Uint16(k[5:7]))
		if len(k) != 7+n+8 {
			return fmt.Errorf("%w: element record %x", errCorrupt, k)
		}
		key := string(k[7 : 7+n])
		idx := binary.BigEndian.Uint64(k[7+n:])
		l := p.lists[key]
		if l == nil {
			l = &list{}
			p.lists[key] = l
		}
		if idx != uint64(len(l.elems)) {
			return fmt.Errorf("%w: key %q has element %d after %d elements", errCorrupt, key, idx, len(l.elems))
		}
		e := binary.BigEndian.Uint64(v)
		if len(l.elems) > 0 {
			l.encLen++
		}
		l.elems = append(l.elems, e)
		l.encLen += elemLen(e)
	default:
		return fmt.Errorf("%w: record %x", errCorrupt, k)
	}
	return nil
}

// persist commits element elem at index idx of key's list in partition p,
// and lsn unless it is 0, in one synced batch: both survive a crash or
// neither does, which is what makes Check's answer true.
func (s *Store) persist(p int, key string, idx int, elem, lsn uint64) error {
	db, err := s.db.DB()
	if err != nil {
		return fmt.Errorf("listappend: append: %w", err)
	}
	b := db.NewBatch()
	defer b.Close()
	if err := b.Set(elemKey(p, key, idx), binary.BigEndian.AppendUint64(nil, elem), nil); err != nil {
		return fmt.Errorf("listappend: append: %w", err)
	}
	if lsn != 0 {
		if err := b.Set(partKey(kindLSN, p), binary.BigEndian.AppendUint64(nil, lsn), nil); err != nil {
			return fmt.Errorf("listappend: append: %w", err)
		}
	}
	if err := s.db.Commit(b); err != nil {
		return fmt.Errorf("listappend: append: %w", err)
	}
	return nil
}

// partKey is the key of kind's record(s) of partition p (a prefix for
// elements).
func partKey(kind byte, p int) []byte { return binary.BigEndian.AppendUint32([]byte{kind}, uint32(p)) }

// elemKey is the key of element idx of key's list in partition p.
func elemKey(p int, key string, idx int) []byte {
	k := binary.BigEndian.AppendUint16(partKey(kindElem, p), uint16(len(key)))
	k = append(k, key...)
	return binary.BigEndian.AppendUint64(k, uint64(idx))
}
