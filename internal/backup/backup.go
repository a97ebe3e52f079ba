// Package backup is the file format of `neptune backup` and `neptune
// restore`: one replicated service's partitions, each the snapshot its
// primary would send a new replica (the exactly-once table, then the
// service's image) as of a stated LSN.
//
// A file is the magic line, a header (length, JSON, CRC-32C) naming the
// service, when and by which release it was taken, and each partition's
// LSN, size and CRC-32C, then the partitions' bytes in the header's
// order. Verify reads the whole file and refuses a damaged, truncated or
// extended one before anything is restored.
package backup

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Magic opens every backup file.
const Magic = "NEPTUNE-BACKUP\n"

// Format is the version of the layout this package writes and reads.
const Format = 1

// maxHeader bounds a header's size (a damaged length must not make a
// reader allocate gigabytes).
const maxHeader = 16 << 20

// ErrCorrupt marks a backup file that is damaged, truncated or not a
// backup: nothing in it may be restored.
var ErrCorrupt = errors.New("backup file damaged")

// Header describes a backup file.
type Header struct {
	Format     int       `json:"format"`
	Service    string    `json:"service"`
	Created    time.Time `json:"created"`
	Release    string    `json:"release"`
	Partitions []Part    `json:"partitions"`
}

// Part is one partition's snapshot in a backup.
type Part struct {
	Partition int `json:"partition"`
	// LSN is the last write the snapshot holds: every write up to it
	// (and its exactly-once record), none after.
	LSN uint64 `json:"lsn"`
	// LSNEpoch is the epoch of the entry at LSN (0: unknown).
	LSNEpoch uint64 `json:"lsn_epoch"`
	// Node is the primary it was taken from.
	Node   string `json:"node"`
	Bytes  int64  `json:"bytes"`
	CRC32C uint32 `json:"crc32c"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Spool receives one partition's snapshot while it is taken, counting
// and checksumming it, in a temporary file next to the backup.
type Spool struct {
	f   *os.File
	n   int64
	sum hash.Hash32
}

// NewSpool creates a spool in dir.
func NewSpool(dir string) (*Spool, error) {
	f, err := os.CreateTemp(dir, ".neptune-backup-part-*")
	if err != nil {
		return nil, fmt.Errorf("backup: spool: %w", err)
	}
	return &Spool{f: f, sum: crc32.New(castagnoli)}, nil
}

// Write appends to the spool.
func (s *Spool) Write(b []byte) (int, error) {
	n, err := s.f.Write(b)
	s.n += int64(n)
	s.sum.Write(b[:n])
	return n, err
}

// Len is the bytes written so far.
func (s *Spool) Len() int64 { return s.n }

// Reset empties the spool (a snapshot that failed part way is taken
// again).
func (s *Spool) Reset() error {
	s.n, s.sum = 0, crc32.New(castagnoli)
	if err := s.f.Truncate(0); err != nil {
		return fmt.Errorf("backup: spool: %w", err)
	}
	_, err := s.f.Seek(0, io.SeekStart)
	return err
}

// Close removes the spool.
func (s *Spool) Close() error {
	s.f.Close()
	return os.Remove(s.f.Name())
}

// Write writes the backup file path atomically (a temporary file, synced,
// renamed) from h and one spool per h.Partitions, in order; it fills in
// each Part's Bytes and CRC32C from its spool and h's Format.
func Write(path string, h Header, spools []*Spool) error {
	if len(spools) != len(h.Partitions) {
		return fmt.Errorf("backup: %d spools for %d partitions", len(spools), len(h.Partitions))
	}
	h.Format = Format
	for i, s := range spools {
		h.Partitions[i].Bytes, h.Partitions[i].CRC32C = s.n, s.sum.Sum32()
	}
	js, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("backup: header: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".neptune-backup-*")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer os.Remove(f.Name()) // no-op after the rename
	defer f.Close()
	bw := bufio.NewWriterSize(f, 256<<10)
	bw.WriteString(Magic)
	bw.Write(binary.BigEndian.AppendUint32(nil, uint32(len(js))))
	bw.Write(js)
	bw.Write(binary.BigEndian.AppendUint32(nil, crc32.Checksum(js, castagnoli)))
	for i, s := range spools {
		if _, err := s.f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("backup: partition %d: %w", h.Partitions[i].Partition, err)
		}
		if _, err := io.Copy(bw, s.f); err != nil {
			return fmt.Errorf("backup: partition %d: %w", h.Partitions[i].Partition, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("backup: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("backup: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("backup: write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// File is an open backup file whose header was read and checked.
type File struct {
	Header
	f    *os.File
	data int64 // offset of the first partition's bytes
}

// Open opens the backup file path and checks its header (not its
// partitions: Verify).
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	bf, err := readHeader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return bf, nil
}

func readHeader(f *os.File) (*File, error) {
	corrupt := func(format string, a ...any) (*File, error) {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
	}
	br := bufio.NewReader(f)
	magic := make([]byte, len(Magic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != Magic {
		return corrupt("not a Neptune backup (no %q at the start)", Magic[:len(Magic)-1])
	}
	var n [4]byte
	if _, err := io.ReadFull(br, n[:]); err != nil {
		return corrupt("truncated in the header")
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxHeader {
		return corrupt("header length %d is beyond %d", size, maxHeader)
	}
	js := make([]byte, size)
	if _, err := io.ReadFull(br, js); err != nil {
		return corrupt("truncated in the header")
	}
	if _, err := io.ReadFull(br, n[:]); err != nil {
		return corrupt("truncated in the header")
	}
	if got, want := crc32.Checksum(js, castagnoli), binary.BigEndian.Uint32(n[:]); got != want {
		return corrupt("header checksum %08x, recorded %08x", got, want)
	}
	var h Header
	if err := json.Unmarshal(js, &h); err != nil {
		return corrupt("header: %v", err)
	}
	if h.Format != Format {
		return nil, fmt.Errorf("backup: format %d, this release reads format %d", h.Format, Format)
	}
	seen := map[int]bool{}
	for _, p := range h.Partitions {
		if p.Bytes < 0 || seen[p.Partition] || p.Partition < 0 {
			return corrupt("header: partition %d listed twice or with %d bytes", p.Partition, p.Bytes)
		}
		seen[p.Partition] = true
	}
	return &File{Header: h, f: f, data: int64(len(Magic)) + 8 + int64(size)}, nil
}

// Close closes the file.
func (b *File) Close() error { return b.f.Close() }

// offset is where partition i's bytes start.
func (b *File) offset(i int) int64 {
	off := b.data
	for _, p := range b.Partitions[:i] {
		off += p.Bytes
	}
	return off
}

// Verify reads every partition's bytes and checks its size and checksum,
// and that nothing follows the last one: a damaged, truncated or
// extended file is refused with ErrCorrupt, naming what is wrong.
// progress, if set, is told the bytes read so far.
func (b *File) Verify(progress func(read int64)) error {
	pr := &progressReader{at: progress}
	for i := range b.Partitions {
		r, err := b.Open(i)
		if err != nil {
			return err
		}
		pr.r = r
		if _, err := io.Copy(io.Discard, pr); err != nil {
			return err
		}
	}
	st, err := b.f.Stat()
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if end := b.offset(len(b.Partitions)); st.Size() != end {
		return fmt.Errorf("%w: %s: %d bytes, the header accounts for %d", ErrCorrupt, b.f.Name(), st.Size(), end)
	}
	return nil
}

// Find is the index of partition in Partitions, or -1.
func (b *File) Find(partition int) int {
	for i, p := range b.Partitions {
		if p.Partition == partition {
			return i
		}
	}
	return -1
}

// Open returns a reader of Partitions[i]'s bytes that fails with
// ErrCorrupt, instead of io.EOF, if they are short or their checksum is
// not the recorded one.
func (b *File) Open(i int) (io.Reader, error) {
	if i < 0 || i >= len(b.Partitions) {
		return nil, fmt.Errorf("backup: no partition at index %d", i)
	}
	p := b.Partitions[i]
	return &partReader{r: io.NewSectionReader(b.f, b.offset(i), p.Bytes), p: p, sum: crc32.New(castagnoli), name: b.f.Name()}, nil
}

type partReader struct {
	r    io.Reader
	p    Part
	n    int64
	sum  hash.Hash32
	name string
}

func (r *partReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.n += int64(n)
	r.sum.Write(b[:n])
	if errors.Is(err, io.EOF) {
		switch {
		case r.n != r.p.Bytes:
			return n, fmt.Errorf("%w: %s is truncated: partition %d has %d of its %d bytes", ErrCorrupt, r.name, r.p.Partition, r.n, r.p.Bytes)
		case r.sum.Sum32() != r.p.CRC32C:
			return n, fmt.Errorf("%w: %s: partition %d checksum %08x, recorded %08x", ErrCorrupt, r.name, r.p.Partition, r.sum.Sum32(), r.p.CRC32C)
		}
	}
	return n, err
}

// progressReader tells at (if set) the bytes read through it so far.
type progressReader struct {
	r  io.Reader
	n  int64
	at func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if n > 0 && p.at != nil {
		p.at(p.n)
	}
	return n, err
}
