package wal

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// The dedup table (replica.DedupTable) lives in the same pebble store as
// the log, under 'd'+identity, with its high-water time under 't'. It is
// written in the same batch as the executed marker (SetAppliedDedup), so
// after a crash the stored table covers exactly the entries up to the
// stored marker; recovery's CHECK then records the entries it finds
// executed above the marker.

// SetAppliedDedup records the executed marker lsn together with the dedup
// table's changes, atomically.
func (l *Log) SetAppliedDedup(lsn replica.LSN, put []replica.DedupRecord, del []string, high int64, sync bool) error {
	b := l.db.NewBatch()
	defer b.Close()
	if lsn > 0 {
		if err := b.Set(appliedKey, binary.BigEndian.AppendUint64(nil, uint64(lsn)), nil); err != nil {
			return fmt.Errorf("wal: %w", err)
		}
	}
	for _, id := range del {
		if err := b.Delete(dedupKey(id), nil); err != nil {
			return fmt.Errorf("wal: %w", err)
		}
	}
	for _, r := range put {
		if err := b.Set(dedupKey(r.WriteID), encodeDedup(r), nil); err != nil {
			return fmt.Errorf("wal: %w", err)
		}
	}
	if err := b.Set(dedupHighKey, binary.BigEndian.AppendUint64(nil, uint64(high)), nil); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if err := l.commit(b, syncOpt(sync)); err != nil {
		return fmt.Errorf("wal: commit: %w", err)
	}
	l.applied = max(l.applied, lsn)
	return nil
}

// Dedup returns the stored dedup records and high-water time.
func (l *Log) Dedup() ([]replica.DedupRecord, int64, error) {
	var high int64
	if v, closer, err := l.db.Get(dedupHighKey); err == nil {
		if len(v) == 8 {
			high = int64(binary.BigEndian.Uint64(v))
		}
		closer.Close()
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return nil, 0, fmt.Errorf("wal: %w", err)
	}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'d'}, UpperBound: []byte{'e'}})
	if err != nil {
		return nil, 0, fmt.Errorf("wal: %w", err)
	}
	var rs []replica.DedupRecord
	for it.First(); it.Valid(); it.Next() {
		r, err := decodeDedup(string(it.Key()[1:]), it.Value())
		if err != nil {
			return nil, 0, errors.Join(err, it.Close())
		}
		rs = append(rs, r)
	}
	return rs, high, errors.Join(it.Error(), it.Close())
}

const (
	dedupHasErr = 1 << iota
	dedupRecovered
)

func encodeDedup(r replica.DedupRecord) []byte {
	var flags uint64
	if r.HasErr {
		flags |= dedupHasErr
	}
	if r.Recovered {
		flags |= dedupRecovered
	}
	b := make([]byte, 0, 32+len(r.Err)+len(r.Body))
	for _, u := range []uint64{uint64(r.LSN), uint64(r.Time), flags, uint64(len(r.Err))} {
		b = binary.AppendUvarint(b, u)
	}
	b = append(b, r.Err...)
	return append(b, r.Body...)
}

func decodeDedup(id string, b []byte) (replica.DedupRecord, error) {
	d := decoder{b: b}
	r := replica.DedupRecord{WriteID: id, LSN: replica.LSN(d.uvarint()), Time: int64(d.uvarint())}
	flags := d.uvarint()
	r.Err = d.str()
	if d.err != nil {
		return r, d.err
	}
	r.HasErr, r.Recovered = flags&dedupHasErr != 0, flags&dedupRecovered != 0
	if len(d.b) > 0 {
		r.Body = append([]byte(nil), d.b...)
	}
	return r, nil
}

// upgrade rewrites a log written before entries carried a write identity
// and time (no format key) in the current encoding, once, atomically.
func (l *Log) upgrade() error {
	if _, closer, err := l.db.Get(formatKey); err == nil {
		closer.Close()
		return nil
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("wal: %w", err)
	}
	b := l.db.NewBatch()
	defer b.Close()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'e'}, UpperBound: []byte{'f'}})
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		e, err := decodeEntryFormat(it.Value(), 1)
		if err != nil {
			return errors.Join(err, it.Close())
		}
		if err := b.Set(append([]byte(nil), it.Key()...), encodeEntry(e), nil); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if err := b.Set(formatKey, []byte{entryFormat}, nil); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if err := l.commit(b, pebble.Sync); err != nil {
		return fmt.Errorf("wal: upgrade: %w", err)
	}
	return nil
}
