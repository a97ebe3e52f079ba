package check

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// hist builds list-append histories tersely; times are milliseconds.
type hist struct{ ListHistory }

func (h *hist) app(key string, e uint64, o AppendOutcome, start, end int) *hist {
	a := AppendOp{Key: key, Element: e, Outcome: o, Client: fmt.Sprintf("c%d", e), Start: ms(start)}
	if end >= 0 {
		a.End = ms(end)
	}
	h.Appends = append(h.Appends, a)
	return h
}

func (h *hist) ok(key string, e uint64, start, end int) *hist {
	return h.app(key, e, AppendOK, start, end)
}

func (h *hist) read(key string, start, end int, list ...uint64) *hist {
	h.Reads = append(h.Reads, ListRead{Key: key, List: list, Client: "r", Start: ms(start), End: ms(end)})
	return h
}

// final records list as key's final list on each of replicas of partition p.
func (h *hist) final(p, key string, list []uint64, replicas ...string) *hist {
	for _, r := range replicas {
		h.Finals = append(h.Finals, FinalList{Partition: p, Replica: r, Key: key, List: list})
	}
	return h
}

func mustCheckList(t *testing.T, h ListHistory) *ListReport {
	t.Helper()
	rep, err := ListAppend(h)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// expect fails unless rep's counts are exactly want (absent kinds: 0) and
// every anomaly counted has an example whose message contains the given
// text.
func expect(t *testing.T, rep *ListReport, want map[Anomaly]int, text ...string) {
	t.Helper()
	for a := range numAnomalies {
		if rep.Counts[a] != want[a] {
			t.Errorf("%s: %d findings, want %d\n%s", a, rep.Counts[a], want[a], rep)
		}
	}
	s := rep.String()
	for _, x := range text {
		if !strings.Contains(s, x) {
			t.Errorf("report does not mention %q:\n%s", x, s)
		}
	}
}

func TestListAppendValid(t *testing.T) {
	var h hist
	h.ok("x", 1, 0, 10).
		ok("x", 2, 5, 15). // concurrent with 1: either order is fine
		app("x", 3, AppendUnknown, 20, 30).
		app("x", 4, AppendUnknown, 20, -1). // never answered, never applied
		app("x", 5, AppendFailed, 21, 22).
		ok("x", 6, 40, 50).
		read("x", 0, 1).
		read("x", 12, 16, 2).
		read("x", 31, 35, 2, 1, 3).
		read("x", 60, 70, 2, 1, 3, 6).
		ok("y", 1, 0, 5). // elements are unique per key, not globally
		final("p0", "x", []uint64{2, 1, 3, 6}, "a", "b", "c").
		final("p1", "y", []uint64{1}, "b", "c", "d")
	rep := mustCheckList(t, h.ListHistory)
	expect(t, rep, nil)
	if !rep.Valid() {
		t.Fatal(rep)
	}
	got := [...]int{rep.Keys, rep.Appends, rep.Acked, rep.Failed, rep.Unknown, rep.UnknownApplied, rep.UnknownNotApplied, rep.Reads, rep.Finals, rep.Unverified}
	if want := [...]int{2, 7, 4, 1, 2, 1, 1, 4, 6, 0}; got != want {
		t.Fatalf("counts %v, want %v", got, want)
	}
}

func TestListAppendLost(t *testing.T) {
	t.Run("acknowledged, missing on one replica", func(t *testing.T) {
		var h hist
		h.ok("x", 1, 0, 10).ok("x", 2, 20, 30).
			final("p", "x", []uint64{1, 2}, "a", "b").
			final("p", "x", []uint64{1}, "c")
		expect(t, mustCheckList(t, h.ListHistory), map[Anomaly]int{Lost: 1, Divergent: 1},
			`element 2 (acknowledged; appended by client c2`, "missing from the final list on 1 of 3 replicas of partition p: c")
	})
	t.Run("acknowledged, missing everywhere", func(t *testing.T) {
		var h hist
		h.ok("x", 1, 0, 10).ok("x", 2, 20, 30).final("p", "x", []uint64{1}, "a", "b")
		expect(t, mustCheckList(t, h.ListHistory), map[Anomaly]int{Lost: 1}, "on 2 of 2 replicas of partition p: a, b")
	})
	t.Run("unknown outcome, seen by a read, then gone", func(t *testing.T) {
		var h hist
		h.ok("x", 1, 0, 10).app("x", 2, AppendUnknown, 20, 30).
			read("x", 40, 45, 1, 2).
			final("p", "x", []uint64{1}, "a")
		expect(t, mustCheckList(t, h.ListHistory), map[Anomaly]int{Lost: 1}, "outcome unknown, but a read that ended at t+45ms saw it")
	})
	t.Run("unknown outcome, never seen: not lost", func(t *testing.T) {
		var h hist
		h.ok("x", 1, 0, 10).app("x", 2, AppendUnknown, 20, 30).final("p", "x", []uint64{1}, "a")
		rep := mustCheckList(t, h.ListHistory)
		expect(t, rep, nil)
		if rep.UnknownNotApplied != 1 || rep.UnknownApplied != 0 {
			t.Fatalf("unknown resolved %d applied, %d not; want 0, 1", rep.UnknownApplied, rep.UnknownNotApplied)
		}
	})
	t.Run("no final list: unverified, not passed", func(t *testing.T) {
		var h hist
		h.ok("x", 1, 0, 10).ok("x", 2, 0, 10).app("x", 3, AppendUnknown, 0, 10).read("x", 20, 30, 3)
		rep := mustCheckList(t, h.ListHistory)
		expect(t, rep, nil, "3 elements unverified")
		if rep.Unverified != 3 {
			t.Fatalf("Unverified = %d, want 3", rep.Unverified)
		}
	})
}

func TestListAppendDuplicated(t *testing.T) {
	var h hist
	h.ok("x", 1, 0, 10).ok("x", 2, 0, 10).ok("y", 7, 0, 10).
		read("x", 20, 30, 1, 2, 1).
		read("x", 20, 30, 1, 2).
		read("y", 20, 30, 7, 7).                    // y's longest list
		final("p", "x", []uint64{1, 2, 1, 1}, "a"). // x's longest; 1 again: still one finding
		final("p", "y", []uint64{7}, "a")
	expect(t, mustCheckList(t, h.ListHistory), map[Anomaly]int{Duplicated: 2},
		`key "x": element 1 appears at indexes 0 and 2 of the final list on replica a`,
		`key "y": element 7 appears at indexes 0 and 1 of read 2`)

	// A duplicate only in a list that is not a prefix of the longest.
	h = hist{}
	h.ok("x", 1, 0, 10).ok("x", 2, 0, 10).ok("x", 3, 0, 10).
		read("x", 20, 30, 2, 2).
		final("p", "x", []uint64{1, 2, 3}, "a")
	expect(t, mustCheckList(t, h.ListHistory), map[Anomaly]int{Duplicated: 1, Reordered: 1}, "element 2 appears at indexes 0 and 1 of read 0")
}

func TestListAppendPhantom(t *testing.T) {
	var h hist
	h.ok("x", 1, 0, 10).app("x", 2, AppendFailed, 0, 10).
		read("x", 20, 30, 1, 2).
		final("p", "x", []uint64{1, 2, 9}, "a")
	rep := mustCheckList(t, h.ListHistory)
	expect(t, rep, map[Anomaly]int{Phantom: 2},
		"element 2 is in the final list on replica a of partition p but its append failed definitely",
		"element 9 is in the final list on replica a of partition p but no client appended it")
	// A failed append that stayed failed is no phantom, and not lost.
	h = hist{}
	h.ok("x", 1, 0, 10).app("x", 2, AppendFailed, 0, 10).final("p", "x", []uint64{1}, "a")
	expect(t, mustCheckList(t, h.ListHistory), nil)
}

func TestListAppendReordered(t *testing.T) {
	var h hist
	h.ok("x", 1, 0, 10).ok("x", 2, 0, 10).ok("x", 3, 0, 10).
		read("x", 20, 30, 1).
		read("x", 20, 30, 1, 2).
		read("x", 20, 30, 2, 1). // disagrees on the order
		read("x", 20, 30, 1, 3). // skips 2, which the final list has before 3
		final("p", "x", []uint64{1, 2, 3}, "a", "b")
	expect(t, mustCheckList(t, h.ListHistory), map[Anomaly]int{Reordered: 2},
		"read 2 by client r [t+20ms, t+30ms] (2 elements) is not a prefix of the final list on replica a of partition p (3 elements): at index 0 it has 2 where the other has 1",
		"read 3 by client r [t+20ms, t+30ms] (2 elements) is not a prefix of the final list on replica a of partition p (3 elements): at index 1 it has 3 where the other has 2")

	// Prefix consistency is per key: different keys never conflict.
	h = hist{}
	h.ok("x", 1, 0, 10).ok("y", 2, 0, 10).read("x", 20, 30, 1).read("y", 20, 30, 2)
	expect(t, mustCheckList(t, h.ListHistory), nil)
}

func TestListAppendDivergent(t *testing.T) {
	var h hist
	h.app("x", 1, AppendUnknown, 0, 10).app("x", 2, AppendUnknown, 0, 10).
		final("p", "x", []uint64{1, 2}, "a", "c").
		final("p", "x", []uint64{1}, "b").
		app("y", 1, AppendUnknown, 0, 10).app("y", 2, AppendUnknown, 0, 10).
		final("q", "y", []uint64{1, 2}, "a").
		final("q", "y", []uint64{2, 1}, "b")
	rep := mustCheckList(t, h.ListHistory)
	// Nothing was acknowledged or read, so nothing is lost; y's replicas
	// also disagree on the order.
	expect(t, rep, map[Anomaly]int{Divergent: 2, Reordered: 1},
		`key "x" of partition p: replicas hold different lists (elements per replica: a 2, b 1, c 2); a and b first differ at index 1`,
		`key "y" of partition q: replicas hold different lists (elements per replica: a 2, b 2); a and b first differ at index 0`)
	if rep.UnknownApplied != 4 {
		t.Fatalf("UnknownApplied = %d, want 4", rep.UnknownApplied)
	}
}

func TestListAppendRealTime(t *testing.T) {
	t.Run("acknowledged before the other was invoked", func(t *testing.T) {
		var h hist
		h.ok("x", 1, 0, 10).ok("x", 2, 20, 30).final("p", "x", []uint64{2, 1}, "a")
		expect(t, mustCheckList(t, h.ListHistory), map[Anomaly]int{RealTime: 1},
			"in the final list on replica a of partition p, element 2 (invoked at t+20ms) precedes element 1, which was acknowledged at t+10ms")
	})
	t.Run("concurrent appends may go either way", func(t *testing.T) {
		var h hist
		h.ok("x", 1, 0, 25).ok("x", 2, 20, 30).final("p", "x", []uint64{2, 1}, "a")
		expect(t, mustCheckList(t, h.ListHistory), nil)
	})
	t.Run("unacknowledged appends may take effect late", func(t *testing.T) {
		var h hist
		h.app("x", 1, AppendUnknown, 0, 10).ok("x", 2, 20, 30).final("p", "x", []uint64{2, 1}, "a")
		expect(t, mustCheckList(t, h.ListHistory), nil)
	})
	t.Run("seen by a read before the other was invoked", func(t *testing.T) {
		// 1 was never acknowledged, but a read saw it before 2 began.
		var h hist
		h.app("x", 1, AppendUnknown, 0, 10).read("x", 11, 15, 1).ok("x", 2, 20, 30).final("p", "x", []uint64{2, 1}, "a")
		expect(t, mustCheckList(t, h.ListHistory), map[Anomaly]int{RealTime: 1, Reordered: 1},
			"element 2 (invoked at t+20ms) precedes element 1, which was seen by a read that ended at t+15ms")
	})
	t.Run("not adjacent", func(t *testing.T) {
		var h hist
		h.ok("x", 1, 0, 10).ok("x", 2, 0, 100).ok("x", 3, 0, 100).ok("x", 4, 50, 60).
			final("p", "x", []uint64{2, 4, 3, 1}, "a")
		expect(t, mustCheckList(t, h.ListHistory), map[Anomaly]int{RealTime: 1},
			"element 4 (invoked at t+50ms) precedes element 1, which was acknowledged at t+10ms")
	})
}

func TestListAppendBadHistory(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    func(h *hist)
		text string
	}{
		{"repeated element", func(h *hist) { h.ok("x", 1, 0, 10).app("x", 1, AppendFailed, 20, 30) }, "appends 0 and 1 both append element 1"},
		{"ok without end", func(h *hist) { h.ok("x", 1, 0, -1) }, "has no end time"},
		{"no start", func(h *hist) { h.Appends = append(h.Appends, AppendOp{Key: "x", Outcome: AppendUnknown}) }, "has no start time"},
		{"ends before start", func(h *hist) { h.app("x", 1, AppendFailed, 10, 5) }, "ends before it starts"},
		{"bad outcome", func(h *hist) { h.app("x", 1, AppendOutcome(7), 0, 1) }, "outcome AppendOutcome(7)"},
		{"read without end", func(h *hist) { h.Reads = append(h.Reads, ListRead{Key: "x", Start: ms(1)}) }, "read 0 of key"},
		{"final without replica", func(h *hist) { h.final("p", "x", nil, "") }, "names no replica"},
		{"final twice", func(h *hist) { h.final("p", "x", nil, "a", "a") }, "final lists 0 and 1"},
		{"key in two partitions", func(h *hist) { h.final("p", "x", nil, "a").final("q", "x", nil, "b") }, "partitions p and q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h hist
			tc.h(&h)
			_, err := ListAppend(h.ListHistory)
			if !errors.Is(err, ErrBadHistory) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want ErrBadHistory mentioning %q", err, tc.text)
			}
		})
	}
}

func TestListAppendExamplesCapped(t *testing.T) {
	var h hist
	for e := range uint64(MaxListExamples + 5) {
		h.ok("x", e, 0, 10)
	}
	h.final("p", "x", nil, "a")
	rep := mustCheckList(t, h.ListHistory)
	if rep.Count(Lost) != MaxListExamples+5 || len(rep.Examples) != MaxListExamples {
		t.Fatalf("%d lost, %d examples; want %d and %d", rep.Count(Lost), len(rep.Examples), MaxListExamples+5, MaxListExamples)
	}
	// Examples are in a stable order: by anomaly, then key and element.
	if rep.Examples[0].Element != 0 || rep.Examples[MaxListExamples-1].Element != MaxListExamples-1 {
		t.Fatalf("examples out of order: %v", rep.Examples)
	}
}

// ---- property tests: simulated correct runs, then one injected fault ----

// simulate records a run of a correct, linearizable list-append service:
// each operation takes effect at a random instant inside its call (an
// unknown-outcome append possibly after the client gave up, or never),
// so every check must pass. Elements are unique per key.
func simulate(rng *rand.Rand, ops, keys, parts, replicas int) ListHistory {
	type event struct {
		at   time.Time
		app  int // index in Appends, or -1
		read int // index in Reads, or -1
	}
	var h ListHistory
	events := make([][]event, keys)
	span := time.Duration(ops) * time.Millisecond
	next := uint64(0)
	for range ops {
		k := rng.IntN(keys)
		key := fmt.Sprintf("k%d", k)
		client := fmt.Sprintf("c%d", rng.IntN(16))
		start := t0.Add(time.Duration(rng.Int64N(int64(span))))
		end := start.Add(time.Duration(1+rng.IntN(40)) * time.Millisecond)
		at := start.Add(time.Duration(rng.Int64N(int64(end.Sub(start)) + 1)))
		if rng.IntN(3) == 0 {
			h.Reads = append(h.Reads, ListRead{Key: key, Client: client, Start: start, End: end})
			events[k] = append(events[k], event{at: at, app: -1, read: len(h.Reads) - 1})
			continue
		}
		next += uint64(1 + rng.IntN(3))
		a := AppendOp{Key: key, Element: next, Client: client, Start: start, End: end}
		switch r := rng.IntN(10); {
		case r < 7:
			a.Outcome = AppendOK
		case r < 8:
			a.Outcome = AppendFailed
			at = time.Time{}
		default:
			a.Outcome = AppendUnknown
			switch rng.IntN(3) {
			case 0: // never took effect
				at = time.Time{}
			case 1: // took effect after the client gave up
				at = end.Add(time.Duration(rng.IntN(100)) * time.Millisecond)
			}
			if rng.IntN(2) == 0 {
				a.End = time.Time{}
			}
		}
		h.Appends = append(h.Appends, a)
		if !at.IsZero() {
			events[k] = append(events[k], event{at: at, app: len(h.Appends) - 1, read: -1})
		}
	}
	for k, evs := range events {
		slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
		var list []uint64
		for _, ev := range evs {
			if ev.app >= 0 {
				list = append(list, h.Appends[ev.app].Element)
			} else {
				h.Reads[ev.read].List = slices.Clone(list)
			}
		}
		for r := range replicas {
			h.Finals = append(h.Finals, FinalList{Partition: fmt.Sprintf("p%d", k%parts), Replica: fmt.Sprintf("n%d", (k+r)%(replicas+1)),
				Key: fmt.Sprintf("k%d", k), List: slices.Clone(list)})
		}
	}
	return h
}

// inject applies one fault of kind a to h, as a buggy system would, and
// reports whether h offered a place for it.
func inject(rng *rand.Rand, h *ListHistory, a Anomaly) bool {
	finalsOf := func(key string) []int {
		var out []int
		for i, f := range h.Finals {
			if f.Key == key {
				out = append(out, i)
			}
		}
		return out
	}
	type elem struct {
		key string
		e   uint64
	}
	appendOf := map[elem]AppendOp{}
	for _, ap := range h.Appends {
		appendOf[elem{ap.Key, ap.Element}] = ap
	}
	nonEmpty := []int{}
	for i, f := range h.Finals {
		if len(f.List) > 0 {
			nonEmpty = append(nonEmpty, i)
		}
	}
	switch a {
	case Lost: // one replica drops an acknowledged element
		for _, i := range nonEmpty {
			f := &h.Finals[i]
			for j, e := range f.List {
				if appendOf[elem{f.Key, e}].Outcome == AppendOK {
					f.List = slices.Delete(slices.Clone(f.List), j, j+1)
					return true
				}
			}
		}
	case Duplicated: // a write applied twice, on every replica
		if len(nonEmpty) == 0 {
			return false
		}
		f := h.Finals[nonEmpty[rng.IntN(len(nonEmpty))]]
		e := f.List[rng.IntN(len(f.List))]
		for _, i := range finalsOf(f.Key) {
			h.Finals[i].List = append(slices.Clone(h.Finals[i].List), e)
		}
		return true
	case Phantom: // a failed append took effect after all
		for _, ap := range h.Appends {
			if ap.Outcome == AppendFailed {
				for _, i := range finalsOf(ap.Key) {
					h.Finals[i].List = append(slices.Clone(h.Finals[i].List), ap.Element)
				}
				return true
			}
		}
	case Reordered: // a read sees two elements the wrong way round
		for i, r := range h.Reads {
			if len(r.List) >= 2 {
				l := slices.Clone(r.List)
				j := rng.IntN(len(l) - 1)
				l[j], l[j+1] = l[j+1], l[j]
				h.Reads[i].List = l
				return true
			}
		}
	case Divergent: // one of several replicas misses the last element
		for _, i := range nonEmpty {
			if len(finalsOf(h.Finals[i].Key)) >= 2 {
				f := &h.Finals[i]
				f.List = slices.Clone(f.List[:len(f.List)-1])
				return true
			}
		}
	case RealTime: // two appends, one acknowledged before the other began, swapped everywhere
		for _, i := range nonEmpty {
			f := h.Finals[i]
			for j := 0; j+1 < len(f.List); j++ {
				x, y := appendOf[elem{f.Key, f.List[j]}], appendOf[elem{f.Key, f.List[j+1]}]
				if x.Outcome == AppendOK && x.End.Before(y.Start) {
					for _, k := range finalsOf(f.Key) {
						l := slices.Clone(h.Finals[k].List)
						l[j], l[j+1] = l[j+1], l[j]
						h.Finals[k].List = l
					}
					return true
				}
			}
		}
	}
	return false
}

// propertyCheck simulates a correct run from seed, checks that it passes,
// then injects fault (if it is an anomaly) and checks that it is found.
func propertyCheck(t *testing.T, seed uint64, ops int, fault Anomaly) {
	rng := rand.New(rand.NewPCG(seed, 1))
	h := simulate(rng, ops, 1+rng.IntN(8), 1+rng.IntN(3), 1+rng.IntN(3))
	rep, err := ListAppend(h)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if !rep.Valid() {
		t.Fatalf("seed %d: a correct run was flagged:\n%s", seed, rep)
	}
	if rep.Acked+rep.Failed+rep.Unknown != rep.Appends || rep.UnknownApplied+rep.UnknownNotApplied != rep.Unknown || rep.Unverified != 0 {
		t.Fatalf("seed %d: inconsistent counts:\n%s", seed, rep)
	}
	if fault < 0 || fault >= numAnomalies || !inject(rng, &h, fault) {
		return
	}
	rep, err = ListAppend(h)
	if err != nil {
		t.Fatalf("seed %d: after injecting %s: %v", seed, fault, err)
	}
	if rep.Count(fault) == 0 {
		t.Fatalf("seed %d: injected %s, not found:\n%s", seed, fault, rep)
	}
}

func TestListAppendProperty(t *testing.T) {
	for seed := range uint64(40) {
		for fault := range numAnomalies {
			propertyCheck(t, seed, 300, fault)
		}
	}
}

// TestListAppendInjectionApplies guards the property test: every fault
// kind must find a place in a typical run, or the test would pass vacuously.
func TestListAppendInjectionApplies(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1))
	for fault := range numAnomalies {
		h := simulate(rng, 500, 3, 2, 3)
		if !inject(rng, &h, fault) {
			t.Errorf("no place to inject %s", fault)
		}
	}
}

func FuzzListAppend(f *testing.F) {
	for fault := range numAnomalies + 1 {
		f.Add(uint64(fault)*7919, uint8(fault))
	}
	f.Fuzz(func(t *testing.T, seed uint64, fault uint8) {
		propertyCheck(t, seed, 200, Anomaly(fault%uint8(numAnomalies+1)))
	})
}

// TestListAppendLargeHistory runs the checker on the scale of the fault
// suite's goal (over 100,000 operations, long lists, many reads) with one
// of each fault injected.
func TestListAppendLargeHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("large history")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	h := simulate(rng, 150_000, 500, 16, 3)
	start := time.Now()
	rep, err := ListAppend(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checked %d appends, %d reads, %d final lists in %v", rep.Appends, rep.Reads, rep.Finals, time.Since(start))
	if !rep.Valid() {
		t.Fatalf("a correct run was flagged:\n%s", rep)
	}
	for fault := range numAnomalies {
		if !inject(rng, &h, fault) {
			t.Fatalf("no place to inject %s", fault)
		}
	}
	rep, err = ListAppend(h)
	if err != nil {
		t.Fatal(err)
	}
	for fault := range numAnomalies {
		if rep.Count(fault) == 0 {
			t.Errorf("injected %s, not found", fault)
		}
	}
	t.Log(rep)
}
