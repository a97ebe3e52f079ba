package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	crdberrors "github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/record"
	"github.com/cockroachdb/pebble/vfs"
)

// Storage failures (issue 28): a full disk or an I/O error must not take
// the node down, and damage must never pass silently.
//
// pebble reports an I/O error it cannot undo (a failed WAL write or sync,
// a MANIFEST it could not write) through its logger's Fatalf and then, on
// the commit path, returns as if the commit succeeded. The log's logger
// therefore records the first such error instead of exiting or panicking
// (a panic in one of pebble's goroutines would kill the process), and
// every write checks it: once set, the write (and every later one) fails
// with ErrFailed, and the shell closes the log and opens it again from
// what is on disk. Whether the failed write reached the disk is unknown
// (a sync may fail after the bytes were written), so a caller must treat
// it as of unknown outcome.

// ErrFailed reports that the store failed on an I/O error it cannot undo
// (pebble's "fatal" errors): the log must be closed and opened again.
var ErrFailed = errors.New("wal: storage failed")

// isCorruption reports whether pebble marked err as corruption (with
// cockroachdb/errors' marks, which the standard errors.Is does not see).
func isCorruption(err error) bool { return crdberrors.Is(err, pebble.ErrCorruption) }

// IsNoSpace reports whether err comes from a full file system.
func IsNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// fatalLogger is the pebble logger of one log: Infof is dropped, Errorf
// (background errors: a failed flush or compaction, which pebble retries)
// goes to the node's log, and Fatalf records the failure (see above).
type fatalLogger struct {
	log *slog.Logger

	mu     sync.Mutex
	failed error
	// corrupt counts the corruption pebble reported in the background
	// (a compaction that read a damaged block).
	corrupt []error
}

func (f *fatalLogger) Infof(string, ...any) {}

func (f *fatalLogger) Errorf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if cause := firstError(a); cause != nil && isCorruption(cause) {
		f.mu.Lock()
		f.corrupt = append(f.corrupt, fmt.Errorf("%w: %s", ErrCorrupt, msg))
		f.mu.Unlock()
	}
	f.log.Error("write log storage error", "err", msg)
}

func (f *fatalLogger) Fatalf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	f.mu.Lock()
	if f.failed == nil {
		if cause := firstError(a); cause != nil {
			f.failed = fmt.Errorf("%w: %w", ErrFailed, cause)
		} else {
			f.failed = fmt.Errorf("%w: %s", ErrFailed, msg)
		}
	}
	f.mu.Unlock()
	f.log.Error("write log storage failed: writes stop until it is reopened", "err", msg)
}

func (f *fatalLogger) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

func firstError(a []any) error {
	for _, v := range a {
		if err, ok := v.(error); ok {
			return err
		}
	}
	return nil
}

// Failed is the error that failed the store (nil while it works).
func (l *Log) Failed() error { return l.fatal.err() }

// TakeCorruption returns (and forgets) the corruption pebble reported in
// the background since the last call.
func (l *Log) TakeCorruption() []error {
	l.fatal.mu.Lock()
	defer l.fatal.mu.Unlock()
	c := l.fatal.corrupt
	l.fatal.corrupt = nil
	return c
}

// commit commits b unless the store failed, and reports a failure that
// happened during the commit (pebble then returns nil).
func (l *Log) commit(b *pebble.Batch, o *pebble.WriteOptions) error {
	if err := l.fatal.err(); err != nil {
		return err
	}
	err := b.Commit(o)
	if ferr := l.fatal.err(); ferr != nil {
		return ferr
	}
	return err
}

// set writes one key through commit.
func (l *Log) set(key, value []byte, o *pebble.WriteOptions) error {
	b := l.db.NewBatch()
	defer b.Close()
	if err := b.Set(key, value, nil); err != nil {
		return err
	}
	return l.commit(b, o)
}

// classify marks an error pebble reports as corruption with ErrCorrupt.
func classify(err error) error {
	if err != nil && isCorruption(err) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// Damage is a damaged record found by Scan that pebble will cut the log
// at: in the newest WAL segment, with no valid record after it (what a
// crash in the middle of a write also leaves).
type Damage struct {
	File   string
	Offset int64
	Err    error
}

// Damage reports what Open found damaged at the end of the newest WAL
// segment (everything after it is lost; the replication protocol
// recovers acknowledged entries from the primary).
func (l *Log) Damage() []Damage { return l.damage }

// blockSize is pebble's log block size (record package): a chunk never
// crosses a block boundary.
const blockSize = 32 << 10

// Scan reads every pebble WAL segment in dir, and its newest MANIFEST,
// record by record. pebble itself stops replaying the newest WAL segment
// (and the MANIFEST) at its first damaged record and says nothing: a
// MANIFEST cut short makes pebble look for tables it deleted, a WAL cut
// short loses the writes after the damage. Damage in an older segment is
// an error at open. Scan reports damage followed by a valid record (the
// middle of the log, not a torn end), damage in an older segment and any
// damage in the MANIFEST as an error satisfying errors.Is(err,
// ErrCorrupt); damage at the very end of the newest WAL segment is
// returned as Damage.
func Scan(fs vfs.FS, dir string) ([]Damage, error) {
	names, err := fs.List(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("wal: scan %s: %w", dir, err)
	}
	var segs, manifests, options []uint64
	for _, n := range names {
		if num, ok := strings.CutSuffix(n, ".log"); ok {
			if v, err := strconv.ParseUint(num, 10, 64); err == nil {
				segs = append(segs, v)
			}
		}
		if num, ok := strings.CutPrefix(n, "OPTIONS-"); ok {
			if v, err := strconv.ParseUint(num, 10, 64); err == nil {
				options = append(options, v)
			}
		}
		if num, ok := strings.CutPrefix(n, "MANIFEST-"); ok {
			if v, err := strconv.ParseUint(num, 10, 64); err == nil {
				manifests = append(manifests, v)
			}
		}
	}
	slices.Sort(segs)
	if len(options) > 0 {
		// pebble checks only the comparer and merger names in it.
		path := fs.PathJoin(dir, fmt.Sprintf("OPTIONS-%06d", slices.Max(options)))
		if err := checkOptions(fs, path); err != nil {
			return nil, err
		}
	}
	if len(manifests) > 0 {
		path := fs.PathJoin(dir, fmt.Sprintf("MANIFEST-%06d", slices.Max(manifests)))
		off, cause, _, err := scanLog(fs, path, 0)
		if err != nil {
			return nil, fmt.Errorf("wal: scan %s: %w", path, err)
		}
		if cause != nil {
			return nil, fmt.Errorf("%w: MANIFEST %s damaged at offset %d: %w", ErrCorrupt, path, off, cause)
		}
	}
	var out []Damage
	for i, num := range segs {
		path := fs.PathJoin(dir, fmt.Sprintf("%06d.log", num))
		off, cause, more, err := scanLog(fs, path, num)
		if err != nil {
			return nil, fmt.Errorf("wal: scan %s: %w", path, err)
		}
		if cause == nil {
			continue
		}
		newest := i == len(segs)-1
		if !newest || more {
			where := "an older segment"
			if newest {
				where = "valid records follow it"
			}
			return nil, fmt.Errorf("%w: write log segment %s damaged at offset %d (%s): %w", ErrCorrupt, path, off, where, cause)
		}
		out = append(out, Damage{File: path, Offset: off, Err: cause})
	}
	return out, nil
}

// checkOptions parses an OPTIONS file strictly: every section and key
// known, every value well formed.
func checkOptions(fs vfs.FS, path string) error {
	f, err := fs.Open(path)
	if err != nil {
		return fmt.Errorf("wal: scan %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("wal: scan %s: %w", path, err)
	}
	var o pebble.Options
	if err := o.Parse(string(b), nil); err != nil {
		return fmt.Errorf("%w: OPTIONS file %s: %w", ErrCorrupt, path, err)
	}
	return nil
}

// scanLog reads one log file (a WAL segment numbered num, or a MANIFEST
// with num 0). It returns where the first damaged record starts and why
// (nil cause: none), and whether a valid chunk starting a record of this
// file lies after it.
func scanLog(fs vfs.FS, path string, num uint64) (off int64, cause error, more bool, err error) {
	f, err := fs.Open(path)
	if err != nil {
		return 0, nil, false, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return 0, nil, false, err
	}
	r := record.NewReader(bytes.NewReader(b), pebble.FileNum(num))
	for {
		off = r.Offset()
		rec, err := r.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		switch {
		case err == nil:
			continue
		case err == io.EOF, errors.Is(err, record.ErrZeroedChunk):
			return 0, nil, false, nil // the end, or preallocated space
		case err == io.ErrUnexpectedEOF || isCorruption(err):
			cause = err
		default:
			return 0, nil, false, err
		}
		break
	}
	for pos := int(off) + 1; pos < len(b); pos++ {
		if recordStartsAt(b, pos, num) {
			return off, cause, true, nil
		}
	}
	return off, cause, false, nil
}

// recordStartsAt reports whether a valid chunk that starts a record (full
// or first) begins at pos: recyclable chunks of log num for a WAL
// segment, legacy ones for a MANIFEST (num 0).
func recordStartsAt(b []byte, pos int, num uint64) bool {
	header, types := 7, [2]byte{1, 2}
	if num != 0 {
		header, types = 11, [2]byte{5, 6}
	}
	if pos+header > len(b) || (b[pos+6] != types[0] && b[pos+6] != types[1]) {
		return false
	}
	if num != 0 && binary.LittleEndian.Uint32(b[pos+7:pos+11]) != uint32(num) {
		return false
	}
	end := pos + header + int(binary.LittleEndian.Uint16(b[pos+4:pos+6]))
	if end > len(b) || end > (pos/blockSize+1)*blockSize {
		return false
	}
	c := crc32.Update(0, castagnoli, b[pos+6:end])
	return binary.LittleEndian.Uint32(b[pos:pos+4]) == (c>>15|c<<17)+0xa282ead8
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
