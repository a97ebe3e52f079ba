package pcache

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"
)

// ErrSnapshot is returned for an image Restore cannot use (cut off or
// corrupt).
var ErrSnapshot = errors.New("pcache: bad snapshot")

// A partition's image: snapMagic, its LSN, then each key and value
// (length-prefixed) in key order, then the pair count and snapEnd, so a
// cut-off stream is refused.
const (
	snapMagic = "neptune-pcache-snapshot/1"
	snapEnd   = "end"
	// maxLen bounds one key or value read back.
	maxLen = 1 << 30
)

// Snapshot implements neptune.Snapshotter. It reads the partition in one
// bbolt read transaction, which sees the state after one update (the
// value and the LSN commit together) and does not block updates while it
// streams.
func (c *Cache) Snapshot(ctx context.Context, partition int, w io.Writer) (uint64, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	var lsn uint64
	err := c.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(lsnBucket); b != nil {
			if v := b.Get(partKey(partition)); v != nil {
				lsn = binary.BigEndian.Uint64(v)
			}
		}
		buf := binary.AppendUvarint(nil, uint64(len(snapMagic)))
		buf = append(buf, snapMagic...)
		buf = binary.AppendUvarint(buf, lsn)
		n := uint64(0)
		if b := tx.Bucket(dataBucket(partition)); b != nil {
			err := b.ForEach(func(k, v []byte) error {
				buf = appendBytes(appendBytes(buf, k), v)
				n++
				if len(buf) < 64<<10 {
					return nil
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				_, err := bw.Write(buf)
				buf = buf[:0]
				return err
			})
			if err != nil {
				return err
			}
		}
		// A zero-length key marks the end: bbolt keys are never empty.
		buf = binary.AppendUvarint(buf, 0)
		buf = binary.AppendUvarint(buf, n)
		buf = appendBytes(buf, []byte(snapEnd))
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return 0, fmt.Errorf("pcache: snapshot: %w", err)
	}
	return lsn, nil
}

func appendBytes(b, s []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// Restore implements neptune.Snapshotter: one bbolt update transaction
// replaces the partition's bucket and LSN, committed (and synced) only
// once the whole image was read, so a cut-off one changes nothing.
func (c *Cache) Restore(ctx context.Context, partition int, r io.Reader) (uint64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	bad := func(err error) (uint64, error) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	magic, err := readBytes(br)
	if err != nil {
		return bad(err)
	}
	if string(magic) != snapMagic {
		return bad(fmt.Errorf("header %.100q", magic))
	}
	lsn, err := binary.ReadUvarint(br)
	if err != nil {
		return bad(err)
	}
	err = c.db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(dataBucket(partition)); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
			return err
		}
		data, err := tx.CreateBucket(dataBucket(partition))
		if err != nil {
			return err
		}
		n := uint64(0)
		for ; ; n++ {
			k, err := readBytes(br)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrSnapshot, err)
			}
			if len(k) == 0 {
				break
			}
			v, err := readBytes(br)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrSnapshot, err)
			}
			if err := data.Put(k, v); err != nil {
				return err
			}
			if n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		count, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSnapshot, err)
		}
		end, err := readBytes(br)
		if err != nil || count != n || string(end) != snapEnd {
			return fmt.Errorf("%w: trailer says %d pairs, read %d (%v)", ErrSnapshot, count, n, err)
		}
		lsns, err := tx.CreateBucketIfNotExists(lsnBucket)
		if err != nil {
			return err
		}
		return lsns.Put(partKey(partition), binary.BigEndian.AppendUint64(nil, lsn))
	})
	c.mem.drop(partition) // the partition's values are the image's now
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: %w", err, io.ErrUnexpectedEOF)
		}
		return 0, fmt.Errorf("pcache: restore: %w", err)
	}
	return lsn, nil
}

func readBytes(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > maxLen {
		return nil, fmt.Errorf("%d-byte field", n)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}
