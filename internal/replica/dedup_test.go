package replica

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// apply runs entries through a table the way the shell does and returns
// the identities it executed.
func applyDedup(t *DedupTable, es []Entry) (executed []string) {
	for _, e := range es {
		t.Observe(e.Time)
		if e.WriteID == "" {
			continue
		}
		if _, ok := t.Lookup(e.WriteID); ok {
			continue
		}
		executed = append(executed, e.WriteID)
		t.Record(DedupRecord{WriteID: e.WriteID, LSN: e.LSN, Time: e.Time, Body: []byte("r" + e.WriteID)})
	}
	return executed
}

// A log with retries (repeated identities) and a primary clock that goes
// back after a failover.
func dedupLog(n int, seed uint64) []Entry {
	rng := rand.New(rand.NewPCG(seed, 1))
	var es []Entry
	now := int64(time.Hour)
	for i := range n {
		now += int64(rng.IntN(int(50 * time.Millisecond)))
		if i%97 == 0 {
			now -= int64(2 * time.Second) // a new primary with a slower clock
		}
		id := fmt.Sprintf("c/%d", i)
		if i > 0 && rng.IntN(4) == 0 {
			id = es[len(es)-1-rng.IntN(min(len(es), 40))].WriteID // a retry
		}
		if rng.IntN(10) == 0 {
			id = "" // no identity (or a no-op)
		}
		es = append(es, Entry{LSN: LSN(i + 1), WriteID: id, Time: now})
	}
	return es
}

// TestDedupTableSameOnEveryReplica: replicas applying the same log, one
// of them restarted from its stored table at arbitrary points, execute the
// same identities, each once, and hold the same table.
func TestDedupTableSameOnEveryReplica(t *testing.T) {
	es := dedupLog(3000, 7)
	ttl := 5 * time.Second
	a := NewDedupTable(ttl, nil, 0)
	execA := applyDedup(a, es)

	// b stores its changes (as the shell does) and restarts every 250
	// entries from what it stored.
	stored := map[string]DedupRecord{}
	var high int64
	b := NewDedupTable(ttl, nil, 0)
	var execB []string
	for i := 0; i < len(es); i += 250 {
		execB = append(execB, applyDedup(b, es[i:min(i+250, len(es))])...)
		put, del, h, ok := b.Changes()
		if ok {
			for _, r := range put {
				stored[r.WriteID] = r
			}
			for _, id := range del {
				delete(stored, id)
			}
			high = h
		}
		var recs []DedupRecord
		for _, r := range stored {
			recs = append(recs, r)
		}
		b = NewDedupTable(ttl, recs, high)
	}
	if fmt.Sprint(execA) != fmt.Sprint(execB) {
		t.Fatalf("replicas executed different identities:\n%v\n%v", execA, execB)
	}
	seen := map[string]bool{}
	for _, id := range execA {
		if seen[id] {
			t.Fatalf("%s executed twice within the window", id)
		}
		seen[id] = true
	}
	if a.Len() != b.Len() || a.High() != b.High() {
		t.Fatalf("tables differ: %d records, high %d vs %d, %d", a.Len(), a.High(), b.Len(), b.High())
	}
	for _, r := range a.order {
		if rb, ok := b.Lookup(r.WriteID); !ok || rb.LSN != r.LSN || string(rb.Body) != string(r.Body) {
			t.Fatalf("record %s: %+v vs %+v (%v)", r.WriteID, *r, rb, ok)
		}
	}
	if a.Len() == 0 || a.Len() > len(es)/2 {
		t.Fatalf("%d records kept of %d; want a window of about 5 s of entries", a.Len(), len(es))
	}
}

// TestDedupTableExpiry: a record is kept while entries within TTL of it
// arrive and dropped once an entry's time passes it by more than TTL.
func TestDedupTableExpiry(t *testing.T) {
	tb := NewDedupTable(time.Minute, nil, 0)
	base := int64(time.Hour)
	tb.Observe(base)
	tb.Record(DedupRecord{WriteID: "a", LSN: 1, Time: base})
	tb.Observe(base + int64(time.Minute))
	if _, ok := tb.Lookup("a"); !ok {
		t.Fatal("expired at exactly TTL")
	}
	tb.Observe(base + int64(time.Minute) + 1)
	if _, ok := tb.Lookup("a"); ok {
		t.Fatal("kept after TTL")
	}
	_, del, _, ok := tb.Changes()
	if !ok || len(del) != 1 || del[0] != "a" {
		t.Fatalf("changes: del %v ok %v", del, ok)
	}
	// A repeat of a recorded identity keeps the first result.
	tb.Record(DedupRecord{WriteID: "b", LSN: 5, Body: []byte("first")})
	tb.Record(DedupRecord{WriteID: "b", LSN: 6, Body: []byte("second")})
	if r, _ := tb.Lookup("b"); string(r.Body) != "first" || r.LSN != 5 {
		t.Fatalf("repeat replaced the first record: %+v", r)
	}
}
