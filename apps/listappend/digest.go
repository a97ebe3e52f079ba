package listappend

import (
	"encoding/hex"
	"fmt"
)

// Digest is the digest method's answer: a summary of one replica's
// partition. Two replicas hold the same lists iff their Sums are equal;
// LSN and Replays describe how the replica got there and may legitimately
// differ while it catches up, so they are outside Sum.
type Digest struct {
	Keys     int
	Elements int
	// LSN is the last replicated append applied.
	LSN uint64
	// Replays counts appends this process skipped as already applied.
	Replays uint64
	// Sum is the SHA-256 of the partition's lists.
	Sum [32]byte
}

// String is the digest method's body.
func (d Digest) String() string {
	return fmt.Sprintf("keys=%d elements=%d lsn=%d replays=%d sha256=%x", d.Keys, d.Elements, d.LSN, d.Replays, d.Sum)
}

// ParseDigest parses a digest method's answer.
func ParseDigest(b []byte) (Digest, error) {
	var d Digest
	var sum string
	n, err := fmt.Sscanf(string(b), "keys=%d elements=%d lsn=%d replays=%d sha256=%64s", &d.Keys, &d.Elements, &d.LSN, &d.Replays, &sum)
	if err != nil {
		return Digest{}, fmt.Errorf("%w: digest %s: %w", ErrBadRequest, preview(b), err)
	}
	if n != 5 || len(sum) != 64 {
		return Digest{}, fmt.Errorf("%w: digest %s is incomplete", ErrBadRequest, preview(b))
	}
	if _, err := hex.Decode(d.Sum[:], []byte(sum)); err != nil {
		return Digest{}, fmt.Errorf("%w: digest %s: %w", ErrBadRequest, preview(b), err)
	}
	if d.String() != string(b) {
		return Digest{}, fmt.Errorf("%w: digest %s is not canonical", ErrBadRequest, preview(b))
	}
	return d, nil
}
