package listappend

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// image is a partition's snapshot: its lists and the LSN of the last
// append they reflect. JSON: a cut-off stream does not decode.
type image struct {
	LSN   uint64              `json:"lsn"`
	Lists map[string][]uint64 `json:"lists"`
}

// Snapshot implements neptune.Snapshotter, so a replica that lost its
// log (or never had it) can be brought up to date. The lists are copied
// under the read lock (appends only extend them).
func (s *Store) Snapshot(ctx context.Context, part int, w io.Writer) (uint64, error) {
	s.mu.RLock()
	img := image{Lists: map[string][]uint64{}}
	if p := s.parts[part]; p != nil {
		img.LSN = p.lsn
		for k, l := range p.lists {
			img.Lists[k] = l.elems[:len(l.elems):len(l.elems)]
		}
	}
	s.mu.RUnlock()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := json.NewEncoder(w).Encode(img); err != nil {
		return 0, fmt.Errorf("listappend: snapshot: %w", err)
	}
	return img.LSN, nil
}

// Restore implements neptune.Snapshotter: it reads the whole image, then
// replaces the partition's records in one synced batch and its memory, so
// a failed or cut-off restore changes nothing.
func (s *Store) Restore(ctx context.Context, part int, r io.Reader) (uint64, error) {
	var img image
	if err := json.NewDecoder(r).Decode(&img); err != nil {
		return 0, fmt.Errorf("%w: listappend snapshot: %v", ErrBadRequest, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p := &partition{lists: map[string]*list{}, lsn: img.LSN}
	for k, es := range img.Lists {
		l := &list{elems: es}
		for i, e := range es {
			if i > 0 {
				l.encLen++
			}
			l.encLen += elemLen(e)
		}
		p.lists[k] = l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if s.db != nil {
		db, err := s.db.DB()
		if err != nil {
			return 0, fmt.Errorf("listappend: restore: %w", err)
		}
		b := db.NewBatch()
		defer b.Close()
		err = b.DeleteRange(partKey(kindElem, part), partKey(kindElem, part+1), nil)
		for k, es := range img.Lists {
			for i, e := range es {
				if err == nil {
					err = b.Set(elemKey(part, k, i), binary.BigEndian.AppendUint64(nil, e), nil)
				}
			}
		}
		if err == nil {
			err = b.Set(partKey(kindLSN, part), binary.BigEndian.AppendUint64(nil, img.LSN), nil)
		}
		if err == nil {
			err = s.db.Commit(b)
		}
		if err != nil {
			return 0, fmt.Errorf("listappend: restore: %w", err)
		}
	}
	s.parts[part] = p
	return img.LSN, nil
}
