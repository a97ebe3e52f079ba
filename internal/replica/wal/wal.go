// Package wal is the durable REDO write log of one partition replica, on
// pebble (chosen by measurement: see docs/experiments/replica.md).
//
// The log holds entries (epoch, LSN, method, body, origin), the replica's
// hard state and its executed marker. Entries up to the marker are the
// committed portion (executed by the service); later ones are the
// uncommitted portion, which recovery resolves with CHECK. Durability is
// explicit: a Save or SetApplied with sync=true is on disk when it returns;
// without it, a crash may lose it (pebble's WAL keeps it in order, so a crash
// loses a suffix, never a hole).
//
// A Log is safe for concurrent use (pebble is), but the replica shell is
// expected to write from one goroutine.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// ErrCorrupt reports damaged data: an undecodable record, or damage pebble
// or Scan found in the store.
var ErrCorrupt = errors.New("wal: corrupt data")

var (
	hardStateKey = []byte("h")
	appliedKey   = []byte("a")
	baseKey      = []byte("b")
	// formatKey holds the entry encoding's version: absent in logs written
	// before entries carried a write identity and time (version 1).
	formatKey = []byte("v")
	// dedupHighKey holds the dedup table's high-water entry time, and
	// dedupKey(writeID) one executed identity's record (see replica.DedupTable).
	dedupHighKey = []byte("t")
	// confKey holds the committed replica set (replica.Ready.ConfState).
	confKey = []byte("c")
)

// entryFormat is the version of encodeEntry written now.
const entryFormat = 2

func dedupKey(writeID string) []byte { return append([]byte{'d'}, writeID...) }

func entryKey(l replica.LSN) []byte { return binary.BigEndian.AppendUint64([]byte{'e'}, uint64(l)) }

// Log is one partition replica's write log.
type Log struct {
	db          *pebble.DB
	dir         string
	fatal       *fatalLogger
	first, last replica.LSN // first > last when empty
	applied     replica.LSN
	damage      []Damage
}

// Options are a log's optional settings.
type Options struct {
	// Logger receives pebble's errors (nil: discarded).
	Logger *slog.Logger
}

// Open opens (creating if needed) the log in dir. Damage found on the
// way (Scan, then pebble's own checks) is an error that satisfies
// errors.Is(err, ErrCorrupt), except a damaged record at the very end of
// the newest pebble WAL segment: pebble cuts the log there (as after a
// crash mid-write), Open goes on, and Log.Damage reports it.
func Open(dir string, o Options) (*Log, error) { return open(dir, vfs.Default, o) }

func open(dir string, fs vfs.FS, o Options) (*Log, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	damage, err := Scan(fs, dir)
	if err != nil {
		return nil, err
	}
	fl := &fatalLogger{log: o.Logger.With("dir", dir)}
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: fl})
	if err == nil {
		err = fl.err()
	}
	if err != nil {
		if db != nil {
			_ = db.Close()
		}
		return nil, classify(fmt.Errorf("wal: open %s: %w", dir, err))
	}
	l := &Log{db: db, dir: dir, fatal: fl}
	// Read every key of every table once: pebble checks a table's blocks
	// only when they are read, and damage in one the log no longer needs
	// would otherwise surface at a compaction, long after the start.
	if err := db.CheckLevels(nil); err != nil {
		return nil, errors.Join(classify(fmt.Errorf("wal: check %s: %w", dir, err)), l.Close())
	}
	if err := l.load(); err != nil {
		return nil, errors.Join(classify(err), l.Close())
	}
	l.damage = damage
	return l, nil
}

func (l *Log) load() error {
	if err := l.upgrade(); err != nil {
		return err
	}
	if v, closer, err := l.db.Get(appliedKey); err == nil {
		l.applied = replica.LSN(binary.BigEndian.Uint64(v))
		closer.Close()
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("wal: %w", err)
	}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'e'}, UpperBound: []byte{'f'}})
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	l.first, l.last = l.applied+1, l.applied
	if it.First() {
		l.first = replica.LSN(binary.BigEndian.Uint64(it.Key()[1:]))
	}
	if it.Last() {
		l.last = replica.LSN(binary.BigEndian.Uint64(it.Key()[1:]))
	}
	return errors.Join(it.Error(), it.Close())
}

// First and Last bound the stored entries (First > Last when empty).
func (l *Log) First() replica.LSN { return l.first }

// Last is the highest stored LSN.
func (l *Log) Last() replica.LSN { return l.last }

// Save writes hs (if non-nil) and es atomically; es replace any stored
// entries from es[0].LSN on. With sync, both are durable on return.
func (l *Log) Save(hs *replica.HardState, es []replica.Entry, sync bool) error {
	// Sized for the entries, which are encoded straight into it: a batch
	// grown by doubling, and a separate encoding copied in, cost a large
	// write about three times its size in garbage.
	size := batchOverhead
	for _, e := range es {
		size += batchOverhead + entrySize(e)
	}
	b := l.db.NewBatchWithSize(batchCap(size))
	defer b.Close()
	if hs != nil {
		if err := b.Set(hardStateKey, encodeHardState(*hs), nil); err != nil {
			return fmt.Errorf("wal: %w", err)
		}
	}
	if len(es) > 0 {
		at := es[0].LSN
		if at > l.last+1 && l.last >= l.first {
			return fmt.Errorf("wal: append at LSN %d leaves a gap after %d", at, l.last)
		}
		if at <= l.last {
			if err := b.DeleteRange(entryKey(at), entryKey(l.last+1), nil); err != nil {
				return fmt.Errorf("wal: %w", err)
			}
		}
		for i, e := range es {
			if e.LSN != at+replica.LSN(i) {
				return fmt.Errorf("wal: entries not dense at LSN %d", e.LSN)
			}
			k := entryKey(e.LSN)
			op := b.SetDeferred(len(k), entrySize(e))
			copy(op.Key, k)
			if enc := appendEntry(op.Value[:0], e); len(enc) != len(op.Value) {
				return fmt.Errorf("wal: entry %d encoded to %d bytes, not the %d reserved", e.LSN, len(enc), len(op.Value))
			}
			if err := op.Finish(); err != nil {
				return fmt.Errorf("wal: %w", err)
			}
		}
	}
	if err := l.commit(b, syncOpt(sync)); err != nil {
		return fmt.Errorf("wal: commit: %w", err)
	}
	if len(es) > 0 {
		if l.last < l.first || es[0].LSN < l.first {
			l.first = es[0].LSN // Truncate deletes from First on
		}
		l.last = es[len(es)-1].LSN
	}
	return nil
}

// Persist does the durable part of a replica.Ready, steps 1 and 2 of its
// contract: save the hard state and entries with sync, then truncate.
//
// A Ready with Installed must go through PersistInstalled instead, which
// first resets the log to the snapshot's base.
func (l *Log) Persist(rd *replica.Ready) error {
	return l.PersistInstalled(rd, nil, 0)
}

// PersistInstalled is Persist for a Ready that may carry Installed: the
// log is first reset to the snapshot's base (Install, with the dedup
// table that came with the snapshot), then the rest is persisted.
func (l *Log) PersistInstalled(rd *replica.Ready, dedup []replica.DedupRecord, high int64) error {
	if cs := rd.ConfState; cs != nil {
		// First, synced: the committed set may run ahead of the stored
		// commit point (its entry is committed cluster-wide), never behind
		// a truncation that dropped its entry.
		if err := l.set(confKey, replica.EncodeConfState(*cs), pebble.Sync); err != nil {
			return fmt.Errorf("wal: replica set: %w", err)
		}
	}
	hs := rd.HardState
	if in := rd.Installed; in != nil {
		if err := l.Install(in.LSN, hs, dedup, high); err != nil {
			return err
		}
		hs = nil
	}
	if hs != nil || len(rd.Entries) > 0 {
		if err := l.Save(hs, rd.Entries, true); err != nil {
			return err
		}
	}
	if rd.Truncate > 0 {
		return l.truncate(rd.Truncate, rd.TruncateBase)
	}
	return nil
}

// SetApplied records that the service executed every entry up to lsn.
// Writing it lazily (sync=false, or not every time) is safe: CHECK resolves
// entries the service executed after the recorded marker.
func (l *Log) SetApplied(lsn replica.LSN, sync bool) error {
	if err := l.set(appliedKey, binary.BigEndian.AppendUint64(nil, uint64(lsn)), syncOpt(sync)); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	l.applied = max(l.applied, lsn)
	return nil
}

// Truncate drops entries up to min(upTo, executed marker): entries the
// service has not executed stay, since recovery may need to reissue them.
//
// The range tombstone covers only [First, upTo]: replicas truncate after
// nearly every append, and pebble fragments overlapping tombstones (as
// [0, upTo] ones all are) into O(n²) keys per memtable, which exhausted
// memory. It is not synced: a truncation lost in a crash only leaves
// executed entries that the next one drops.
func (l *Log) Truncate(upTo replica.LSN) error { return l.truncate(upTo, nil) }

// truncate is Truncate that also stores base (a level-1 replica's
// version vector of the dropped entries), in the same batch: dropped
// entries without their base would make the replica take them again.
func (l *Log) truncate(upTo replica.LSN, base map[replica.ID]uint64) error {
	upTo = min(upTo, l.applied, l.last)
	if upTo < l.first {
		return nil
	}
	b := l.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(entryKey(l.first), entryKey(upTo+1), nil); err != nil {
		return fmt.Errorf("wal: truncate: %w", err)
	}
	if base != nil {
		if err := b.Set(baseKey, encodeBase(base), nil); err != nil {
			return fmt.Errorf("wal: truncate: %w", err)
		}
	}
	if err := l.commit(b, pebble.NoSync); err != nil {
		return fmt.Errorf("wal: truncate: %w", err)
	}
	l.first = upTo + 1
	return nil
}

// Entries returns up to maxN entries from LSN from on.
func (l *Log) Entries(from replica.LSN, maxN int) ([]replica.Entry, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(from), UpperBound: []byte{'f'}})
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	var es []replica.Entry
	for it.First(); it.Valid() && len(es) < maxN; it.Next() {
		e, err := decodeEntry(it.Value())
		if err != nil {
			return nil, errors.Join(err, it.Close())
		}
		es = append(es, e)
	}
	return es, errors.Join(it.Error(), it.Close())
}

// Restore reads everything the replica needs to restart.
func (l *Log) Restore() (replica.Restore, error) {
	var rs replica.Restore
	if v, closer, err := l.db.Get(hardStateKey); err == nil {
		rs.HardState, err = decodeHardState(v)
		closer.Close()
		if err != nil {
			return rs, err
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return rs, fmt.Errorf("wal: %w", err)
	}
	if v, closer, err := l.db.Get(baseKey); err == nil {
		rs.Base, err = decodeBase(v)
		closer.Close()
		if err != nil {
			return rs, err
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return rs, fmt.Errorf("wal: %w", err)
	}
	if v, closer, err := l.db.Get(confKey); err == nil {
		cs, err := replica.DecodeConfState(v)
		closer.Close()
		if err != nil {
			return rs, fmt.Errorf("%w: replica set: %w", ErrCorrupt, err)
		}
		rs.ConfState = &cs
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return rs, fmt.Errorf("wal: %w", err)
	}
	rs.Applied = l.applied
	es, err := l.Entries(l.first, int(l.last-l.first+1))
	rs.Entries = es
	return rs, err
}

// Close closes the log. A log that failed (Failed) is closed as far as
// pebble lets it: what it has on disk is what a reopen finds.
func (l *Log) Close() error { return l.db.Close() }

func syncOpt(sync bool) *pebble.WriteOptions {
	if sync {
		return pebble.Sync
	}
	return pebble.NoSync
}

func encodeHardState(hs replica.HardState) []byte {
	b := binary.AppendUvarint(nil, uint64(hs.Epoch))
	b = binary.AppendUvarint(b, uint64(hs.Commit))
	return append(b, hs.Vote...)
}

func decodeHardState(b []byte) (replica.HardState, error) {
	var d decoder
	d.b = b
	hs := replica.HardState{Epoch: replica.Epoch(d.uvarint()), Commit: replica.LSN(d.uvarint())}
	hs.Vote = replica.ID(d.b)
	return hs, d.err
}

func encodeBase(vv map[replica.ID]uint64) []byte {
	var b []byte
	for id, seq := range vv {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = binary.AppendUvarint(b, seq)
	}
	return b
}

func decodeBase(b []byte) (map[replica.ID]uint64, error) {
	d := decoder{b: b}
	vv := map[replica.ID]uint64{}
	for len(d.b) > 0 && d.err == nil {
		id := replica.ID(d.str())
		vv[id] = d.uvarint()
	}
	return vv, d.err
}

func encodeEntry(e replica.Entry) []byte { return appendEntry(make([]byte, 0, entrySize(e)), e) }

// batchOverhead is what a pebble batch adds to a record's key and value
// (kind, lengths, key) and to the batch (header), at most.
const batchOverhead = 64

// batchCap is the capacity a pebble batch needs for size bytes of
// records: pebble rounds its first buffer up to a power of two (from
// 1 KiB) and reallocates a smaller one, whatever it was given. The pages
// a batch never writes are never touched.
func batchCap(size int) int {
	n := 1 << 10
	for n < size {
		n *= 2
	}
	return n
}

// entrySize is the exact length of e's encoding.
func entrySize(e replica.Entry) int {
	n := 0
	for _, u := range []uint64{uint64(e.Epoch), uint64(e.LSN), e.ReqID, e.Seq, uint64(len(e.Method)), uint64(len(e.Origin)), uint64(len(e.WriteID)), uint64(e.Time)} {
		n += uvarintLen(u)
	}
	return n + len(e.Method) + len(e.Origin) + len(e.WriteID) + len(e.Body)
}

func uvarintLen(u uint64) int {
	n := 1
	for ; u >= 0x80; u >>= 7 {
		n++
	}
	return n
}

// appendEntry appends e's encoding to b.
func appendEntry(b []byte, e replica.Entry) []byte {
	for _, u := range []uint64{uint64(e.Epoch), uint64(e.LSN), e.ReqID, e.Seq} {
		b = binary.AppendUvarint(b, u)
	}
	for _, s := range []string{e.Method, string(e.Origin), e.WriteID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(e.Time))
	return append(b, e.Body...)
}

func decodeEntry(b []byte) (replica.Entry, error) { return decodeEntryFormat(b, entryFormat) }

func decodeEntryFormat(b []byte, format int) (replica.Entry, error) {
	d := decoder{b: b}
	e := replica.Entry{Epoch: replica.Epoch(d.uvarint()), LSN: replica.LSN(d.uvarint()), ReqID: d.uvarint(), Seq: d.uvarint()}
	e.Method = d.str()
	e.Origin = replica.ID(d.str())
	if format >= 2 {
		e.WriteID = d.str()
		e.Time = int64(d.uvarint())
	}
	if d.err != nil {
		return e, d.err
	}
	if len(d.b) > 0 {
		e.Body = append([]byte(nil), d.b...) // pebble reuses the value buffer
	}
	return e, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = ErrCorrupt
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = ErrCorrupt
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// Install resets the log to the base of an installed snapshot (see
// replica.Ready.Installed), in one synced batch: no entries, the next one
// at lsn+1; the executed marker at lsn (even if it was higher: a diverged
// replica's service no longer reflects what it executed); hs if non-nil;
// and the dedup table replaced by dedup (the snapshot sender's, possibly
// empty), since records of writes the snapshot replaced would make the
// replica skip their retries. A restart then resumes from the snapshot.
func (l *Log) Install(lsn replica.LSN, hs *replica.HardState, dedup []replica.DedupRecord, high int64) error {
	b := l.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange([]byte{'e'}, []byte{'f'}, nil); err != nil {
		return fmt.Errorf("wal: install: %w", err)
	}
	if err := b.DeleteRange([]byte{'d'}, []byte{'e'}, nil); err != nil {
		return fmt.Errorf("wal: install: %w", err)
	}
	if err := b.Set(appliedKey, binary.BigEndian.AppendUint64(nil, uint64(lsn)), nil); err != nil {
		return fmt.Errorf("wal: install: %w", err)
	}
	if hs != nil {
		if err := b.Set(hardStateKey, encodeHardState(*hs), nil); err != nil {
			return fmt.Errorf("wal: install: %w", err)
		}
	}
	for _, r := range dedup {
		if err := b.Set(dedupKey(r.WriteID), encodeDedup(r), nil); err != nil {
			return fmt.Errorf("wal: install: %w", err)
		}
	}
	if err := b.Set(dedupHighKey, binary.BigEndian.AppendUint64(nil, uint64(high)), nil); err != nil {
		return fmt.Errorf("wal: install: %w", err)
	}
	if err := l.commit(b, pebble.Sync); err != nil {
		return fmt.Errorf("wal: install: %w", err)
	}
	l.first, l.last, l.applied = lsn+1, lsn, lsn
	return nil
}
