// Package listappend is a durable list-append service: each key of a
// partition holds a list of uint64 elements, and a write appends one. It is
// the workload of the fault suite (in the style of Jepsen's list-append):
// because a client appends each element once, a lost write shows as a
// missing element, a write applied twice as a repeated one, and a
// misordered one as two reads that disagree on the order, all of which
// internal/replica/check's ListAppend finds in a recorded history.
//
// New keeps the lists in memory (unit tests); Open also stores them in
// pebble, each append committed and synced together with the partition's
// last applied LSN, so a replica survives a crash and replication's
// recovery can ask Check which writes it already applied.
//
// Methods (bodies are text; see EncodeAppend, EncodeList, Digest):
//   - append (write): "key=element", element a canonical decimal uint64;
//     appends element to key's list; answers with an empty body
//   - append-stream (write stream): each message is an append's body,
//     logged and applied exactly once in the order sent; each answered
//     as append is
//   - read (read): "key"; answers key's list, elements in decimal separated
//     by single spaces (empty for a key never appended to)
//   - digest (read): empty body; answers
//     "keys=K elements=E lsn=L replays=R sha256=H", where H hashes the
//     partition's whole state, so a test can compare replicas
package listappend

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/neptune-cluster/neptune/apps/internal/appkit"

	"github.com/neptune-cluster/neptune"
)

// Name is the service's name.
const Name = "listappend"

// Store holds the partitions this node hosts. It is safe for concurrent
// use; appends to all partitions are serialized, which keeps memory and
// disk in the same order.
type Store struct {
	mu     sync.RWMutex
	parts  map[int]*partition
	db     *appkit.Pebble // nil: in memory only
	closed bool
	// maxListBytes is MaxListBytes; tests lower it.
	maxListBytes int
}

// partition is one partition's state.
type partition struct {
	lists map[string]*list
	// lsn is the LSN of the last replicated append applied (0: none).
	lsn uint64
	// replays counts appends skipped because their LSN was already
	// applied. It lives only in memory: it describes this process's
	// history, not the partition's state.
	replays uint64
}

// list is one key's list and the length of its encoded read answer.
type list struct {
	elems  []uint64
	encLen int
}

// New returns an empty in-memory store. Its data dies with the process, so
// replicated deployments that restart nodes use Open.
func New() *Store {
	return &Store{parts: map[int]*partition{}, maxListBytes: MaxListBytes}
}

// Close closes the store's database, if any. Later calls fail with
// ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.db == nil {
		return nil
	}
	return s.db.Close()
}

// Service returns the listappend service backed by s, with Check as its
// CHECK callback.
func (s *Store) Service() neptune.Service {
	return neptune.Service{
		Name: Name,
		Methods: []neptune.Method{
			{Name: "append", Mode: neptune.Write, Handler: s.append},
			{Name: "append-stream", Mode: neptune.Write, Stream: s.appendStream},
			{Name: "read", Mode: neptune.Read, Handler: s.read},
			{Name: "digest", Mode: neptune.Read, Handler: s.digest},
		},
		Check:     s.Check,
		Snapshots: s,
	}
}

// Check is the CHECK callback: replicas apply writes in LSN order and each
// append records its LSN in the same synced batch as its element, so the
// write at lsn was applied iff lsn is at most the partition's recorded LSN.
//
// A rejected append (malformed, or its list full) records nothing, so
// Check answers false for it when it is the partition's latest write and
// recovery reissues it: harmless, because the rejection depends only on
// the body and the list, which recovery restores, and so repeats.
func (s *Store) Check(_ context.Context, partition int, lsn uint64) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	p := s.parts[partition]
	return p != nil && lsn <= p.lsn, nil
}

// part returns p's state, creating it; callers hold s.mu for writing.
func (s *Store) part(p int) *partition {
	st := s.parts[p]
	if st == nil {
		st = &partition{lists: map[string]*list{}}
		s.parts[p] = st
	}
	return st
}

// append appends an element. A replicated append whose LSN is at or below
// the partition's last applied one is a replay (as in appkit): it is
// acknowledged without being applied again, so the service keeps
// replication's "never twice" promise even if recovery were to ask twice,
// and the digest counts it so a test still sees that it happened. A new
// write always has a new LSN, so duplicates from client retries are not
// hidden here: finding those is what the workload is for.
func (s *Store) append(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	key, elem, err := DecodeAppend(r.Body)
	if err != nil {
		return nil, err
	}
	if r.Partition < 0 || r.Partition > math.MaxUint32 {
		return nil, fmt.Errorf("%w: partition %d is out of range", ErrBadRequest, r.Partition)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	p := s.part(r.Partition)
	if r.LSN != 0 && r.LSN <= p.lsn {
		p.replays++
		return &neptune.Response{}, nil
	}
	l := p.lists[key]
	if l == nil {
		l = &list{}
	}
	grown := l.encLen + elemLen(elem)
	if len(l.elems) > 0 {
		grown++
	}
	if grown > s.maxListBytes {
		return nil, fmt.Errorf("%w: key %q of partition %d holds %d elements (%d bytes encoded, the limit is %d)",
			ErrListFull, key, r.Partition, len(l.elems), l.encLen, s.maxListBytes)
	}
	if s.db != nil {
		if err := s.persist(r.Partition, key, len(l.elems), elem, r.LSN); err != nil {
			return nil, err
		}
	}
	l.elems = append(l.elems, elem)
	l.encLen = grown
	p.lists[key] = l
	if r.LSN != 0 {
		p.lsn = r.LSN
	}
	return &neptune.Response{}, nil
}

func (s *Store) read(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	key, err := DecodeReadKey(r.Body)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	var elems []uint64
	if p := s.parts[r.Partition]; p != nil && p.lists[key] != nil {
		elems = p.lists[key].elems
	}
	return &neptune.Response{Body: EncodeList(elems)}, nil
}

func (s *Store) digest(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	if len(r.Body) != 0 {
		return nil, fmt.Errorf("%w: digest takes no body, got %s", ErrBadRequest, preview(r.Body))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	d := s.parts[r.Partition].digest()
	return &neptune.Response{Body: []byte(d.String())}, nil
}

// digest summarises p (nil is the empty partition). The hash covers the
// keys in sorted order, each length-prefixed and followed by its element
// count and elements, so two states hash alike only if they are equal.
func (p *partition) digest() Digest {
	if p == nil {
		return Digest{Sum: sha256.Sum256(nil)}
	}
	keys := make([]string, 0, len(p.lists))
	for k := range p.lists {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	d := Digest{Keys: len(keys), LSN: p.lsn, Replays: p.replays}
	var buf []byte
	for _, k := range keys {
		elems := p.lists[k].elems
		buf = binary.AppendUvarint(buf[:0], uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(elems)))
		for _, e := range elems {
			buf = binary.BigEndian.AppendUint64(buf, e)
		}
		h.Write(buf)
		d.Elements += len(elems)
	}
	h.Sum(d.Sum[:0])
	return d
}

// errCorrupt marks stored data this package did not write.
var errCorrupt = errors.New("listappend: unexpected stored data")

// appendStream is append as a write stream (Client.OpenStream): every
// message is one key=element append, logged and applied exactly once in
// the order sent, and answered as append answers.
func (s *Store) appendStream(ctx context.Context, r *neptune.Request, st neptune.ServerStream) error {
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		one := *r
		one.Body = m
		resp, err := s.append(ctx, &one)
		if err != nil {
			return err
		}
		if err := st.Send(resp.Body); err != nil {
			return err
		}
	}
}
