package replica

import (
	"cmp"
	"slices"
	"time"
)

// Exactly-once writes. A client write may carry an identity (Entry.WriteID:
// a client id and sequence number, or a caller's idempotency key). A
// retried write can reach the log twice: the client resends it after its
// primary died having logged, or even executed, the first copy. The shell
// executes committed entries in log order and consults a DedupTable first:
// an identity already in the table is not executed again, and its reply is
// the first execution's result. Every replica executes the same committed
// log in the same order, so every replica's table holds the same
// identities, and a new primary or a restarted replica (the table is
// stored with the executed marker) answers a retry exactly as the old
// primary would have.
//
// Expiry is a function of the executed log alone, so every replica applies
// it identically: the table keeps the highest entry time it has seen
// (Entry.Time, assigned by the primary when it logged the entry), and
// drops, oldest first, the records whose time is more than TTL below it.
// A retry later than TTL after the original may execute again.

// DefaultDedupTTL is how long an identity is remembered, measured in the
// primary's entry times: far longer than any client retries a write.
const DefaultDedupTTL = 10 * time.Minute

// DedupRecord is what an identified write returned when it was executed.
type DedupRecord struct {
	// WriteID is the write's identity (Entry.WriteID).
	WriteID string
	LSN     LSN
	// Time is the entry's time (Entry.Time).
	Time int64
	// Body is the handler's response; Err its error text, if HasErr.
	Body   []byte
	Err    string
	HasErr bool
	// Recovered: recovery's CHECK found the write executed, but its
	// response was lost in the crash; a retry gets an empty body.
	Recovered bool
}

// DedupTable is a partition's executed identities. It does no I/O: the
// shell stores the changes (Changes) in the same batch as the executed
// marker, and hands the stored records back to NewDedupTable on restart.
type DedupTable struct {
	ttl   int64
	byID  map[string]*DedupRecord // by WriteID
	order []*DedupRecord          // insertion (execution) order; expiry pops the front
	high  int64                   // highest entry time observed

	put   map[string]*DedupRecord
	del   map[string]bool
	dirty bool
}

// NewDedupTable returns a table holding records (as stored: any order) and
// the stored high-water time. ttl 0 means DefaultDedupTTL.
func NewDedupTable(ttl time.Duration, records []DedupRecord, high int64) *DedupTable {
	if ttl <= 0 {
		ttl = DefaultDedupTTL
	}
	t := &DedupTable{ttl: int64(ttl), byID: map[string]*DedupRecord{}, high: high,
		put: map[string]*DedupRecord{}, del: map[string]bool{}}
	rs := slices.Clone(records)
	// Execution order is LSN order (at level 1, the local log's order).
	slices.SortFunc(rs, func(a, b DedupRecord) int { return cmp.Compare(a.LSN, b.LSN) })
	for i := range rs {
		r := &rs[i]
		t.byID[r.WriteID] = r
		t.order = append(t.order, r)
	}
	return t
}

// Len is the number of identities remembered.
func (t *DedupTable) Len() int { return len(t.byID) }

// Records returns the remembered records in execution order: what a
// snapshot of the partition carries, so that the replica installing it
// skips the same repeats as every other replica.
func (t *DedupTable) Records() []DedupRecord {
	out := make([]DedupRecord, 0, len(t.byID))
	for _, r := range t.order {
		if t.byID[r.WriteID] == r {
			out = append(out, *r)
		}
	}
	return out
}

// High is the highest entry time observed.
func (t *DedupTable) High() int64 { return t.high }

// Lookup returns the record of writeID, if it was executed and has not
// expired.
func (t *DedupTable) Lookup(writeID string) (DedupRecord, bool) {
	r, ok := t.byID[writeID]
	if !ok {
		return DedupRecord{}, false
	}
	return *r, true
}

// Observe advances the table to an executed entry's time and expires what
// has become too old. Call it for every executed entry, identified or not,
// in execution order, before Record.
func (t *DedupTable) Observe(entryTime int64) {
	if entryTime <= t.high {
		return
	}
	t.high, t.dirty = entryTime, true
	limit := t.high - t.ttl
	n := 0
	for _, r := range t.order {
		if r.Time >= limit {
			break
		}
		n++
		if t.byID[r.WriteID] == r {
			delete(t.byID, r.WriteID)
			delete(t.put, r.WriteID)
			t.del[r.WriteID] = true
		}
	}
	if n > 0 {
		clear(t.order[:n])
		t.order = t.order[n:]
	}
}

// Record remembers an executed identity. A repeat of an identity already
// present is ignored (the first execution's result stands).
func (t *DedupTable) Record(rec DedupRecord) {
	if rec.WriteID == "" {
		return
	}
	if _, ok := t.byID[rec.WriteID]; ok {
		return
	}
	r := &rec
	t.byID[r.WriteID] = r
	t.order = append(t.order, r)
	t.put[r.WriteID] = r
	delete(t.del, r.WriteID)
	t.dirty = true
}

// Changes returns the records added and the identities expired since the
// last call, and the high-water time, for the shell to store atomically
// with the executed marker. ok is false when nothing changed.
func (t *DedupTable) Changes() (put []DedupRecord, del []string, high int64, ok bool) {
	if !t.dirty {
		return nil, nil, t.high, false
	}
	for _, r := range t.put {
		put = append(put, *r)
	}
	for id := range t.del {
		del = append(del, id)
	}
	clear(t.put)
	clear(t.del)
	t.dirty = false
	return put, del, t.high, true
}
