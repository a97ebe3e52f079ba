package check

// The list-append checker, in the style of Jepsen's list-append workload
// and its Elle checker, reduced to what a single-key, primary-ordered
// service needs: no transactions, so no dependency cycles to search, only
// the per-key anomalies a replication bug produces.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrBadHistory is returned for a history the checker cannot judge, such as
// two appends of the same element to a key: that is a bug in the test that
// recorded it, and checking anyway would report nonsense.
var ErrBadHistory = errors.New("check: malformed list-append history")

// AppendOutcome is what the client learned about an append.
type AppendOutcome int8

const (
	// AppendUnknown: the call failed in a way that leaves open whether the
	// append ran (a timeout, a lost connection, a primary that died). It is
	// the zero value, so an outcome nobody recorded claims nothing.
	AppendUnknown AppendOutcome = iota
	// AppendOK: the append was acknowledged.
	AppendOK
	// AppendFailed: the call failed with an error that guarantees the
	// append never ran.
	AppendFailed
)

func (o AppendOutcome) String() string {
	switch o {
	case AppendUnknown:
		return "unknown"
	case AppendOK:
		return "ok"
	case AppendFailed:
		return "failed"
	}
	return fmt.Sprintf("AppendOutcome(%d)", int8(o))
}

// AppendOp is one append invoked by a client. Each element is appended to
// its key at most once in a history; that uniqueness is what makes a lost,
// doubled or moved write visible.
type AppendOp struct {
	Key     string
	Element uint64
	Outcome AppendOutcome
	Client  string
	// Start is when the call was invoked; End when its answer arrived
	// (required for AppendOK; ignored otherwise, since an append that was
	// not acknowledged may take effect at any later time).
	Start, End time.Time
}

// ListRead is one successful read of a key's whole list.
type ListRead struct {
	Key        string
	List       []uint64
	Client     string
	Start, End time.Time
}

// FinalList is a key's list as one replica held it at the end of the run,
// after the faults healed and the replicas caught up. A test reads every
// key it used from every replica of the key's partition (a key the replica
// does not hold reads as an empty list).
type FinalList struct {
	Partition, Replica, Key string
	List                    []uint64
}

// ListHistory is everything a list-append run recorded. All times come
// from one clock (the test process's), so that "acknowledged before
// invoked" compares like with like.
type ListHistory struct {
	Appends []AppendOp
	Reads   []ListRead
	Finals  []FinalList
}

// Anomaly is a kind of list-append violation.
type Anomaly int8

const (
	// Lost: an element known to exist (its append was acknowledged, or a
	// read saw it) is missing from a final list of its key. As in Jepsen's
	// set-full checker, a read counts as proof: what a read saw was
	// committed, so it must survive whatever the append's outcome. One
	// finding per element.
	Lost Anomaly = iota
	// Duplicated: an element appears more than once in a read or final
	// list. One finding per element.
	Duplicated
	// Phantom: an element is present whose append failed definitely, or
	// that no client ever appended. One finding per element.
	Phantom
	// Reordered: a read or final list is not a prefix of the key's longest
	// list. Every pair of lists of a key must be prefix-consistent (one a
	// prefix of the other), since each is the key's one history up to some
	// point; that holds iff every list is a prefix of the longest. One
	// finding per list that is not.
	Reordered
	// Divergent: the replicas of a key's partition ended with different
	// lists for it. One finding per key.
	Divergent
	// RealTime: an element precedes one that was acknowledged (or seen by
	// a read) before the first was even invoked: a system that orders
	// writes cannot have ordered the later call first. One finding per
	// element found out of place.
	RealTime
	numAnomalies
)

var anomalyNames = [numAnomalies]string{"lost", "duplicated", "phantom", "reordered", "divergent", "real-time"}

func (a Anomaly) String() string {
	if a >= 0 && a < numAnomalies {
		return anomalyNames[a]
	}
	return fmt.Sprintf("Anomaly(%d)", int8(a))
}

// ListFinding is one anomaly, described well enough to start debugging.
type ListFinding struct {
	Anomaly Anomaly
	Key     string
	// Element is the element concerned: the lost, duplicated or phantom
	// one, or for RealTime the one found too late in a list. Zero for
	// Reordered and Divergent, which concern whole lists.
	Element uint64
	Msg     string
}

func (f ListFinding) String() string { return f.Anomaly.String() + ": " + f.Msg }

// MaxListExamples is how many findings of each anomaly a report keeps.
const MaxListExamples = 10

// ListReport is the checker's verdict.
type ListReport struct {
	Keys int
	// Appends is the number invoked: Acked + Failed + Unknown.
	Appends                int
	Acked, Failed, Unknown int
	// UnknownApplied and UnknownNotApplied split Unknown by whether the
	// element appears in any read or final list.
	UnknownApplied, UnknownNotApplied int
	Reads, Finals                     int
	// Unverified counts elements known to exist on keys without any final
	// list: whether they were lost could not be checked.
	Unverified int
	// Counts is the number of findings of each anomaly (see each
	// Anomaly's doc for what one finding is).
	Counts [numAnomalies]int
	// Examples holds up to MaxListExamples findings of each anomaly, in key
	// order.
	Examples []ListFinding
}

// Valid reports whether no anomaly was found.
func (r *ListReport) Valid() bool { return r.Counts == [numAnomalies]int{} }

// Count returns the number of findings of anomaly a.
func (r *ListReport) Count(a Anomaly) int { return r.Counts[a] }

func (r *ListReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "list-append: %d keys, %d appends (%d ok, %d failed, %d unknown: %d applied, %d not), %d reads, %d final lists",
		r.Keys, r.Appends, r.Acked, r.Failed, r.Unknown, r.UnknownApplied, r.UnknownNotApplied, r.Reads, r.Finals)
	if r.Unverified > 0 {
		fmt.Fprintf(&b, ", %d elements unverified (no final list)", r.Unverified)
	}
	b.WriteString("\n")
	for a := range numAnomalies {
		if a > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", a, r.Counts[a])
	}
	for _, f := range r.Examples {
		b.WriteString("\n  " + f.String())
	}
	return b.String()
}

// ListAppend checks a list-append history. It is pure and runs in time
// O(n log n) in the size of the history (operations plus list elements):
// each key's lists are compared with its longest one, so a list that is a
// prefix of it is never scanned again for element-level anomalies.
//
// Usage:
//
//	rep, err := check.ListAppend(check.ListHistory{Appends: appends, Reads: reads, Finals: finals})
//	if err != nil { ... } // the history itself is malformed
//	if !rep.Valid() { t.Error(rep) }
func ListAppend(h ListHistory) (*ListReport, error) {
	keys, err := indexList(h)
	if err != nil {
		return nil, err
	}
	rep := &ListReport{Keys: len(keys), Appends: len(h.Appends), Reads: len(h.Reads), Finals: len(h.Finals)}
	for _, a := range h.Appends {
		switch a.Outcome {
		case AppendOK:
			rep.Acked++
		case AppendFailed:
			rep.Failed++
		default:
			rep.Unknown++
		}
	}
	origin := earliest(h)
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		kc := keyCheck{h: &h, rep: rep, key: k, keyHist: keys[k], origin: origin}
		kc.run()
	}
	slices.SortStableFunc(rep.Examples, func(a, b ListFinding) int { return cmp.Compare(a.Anomaly, b.Anomaly) })
	return rep, nil
}

// keyHist indexes one key's part of a history.
type keyHist struct {
	appends map[uint64]int // element -> index in Appends
	reads   []int          // indexes in Reads
	finals  []int          // indexes in Finals, sorted by replica
}

// indexList groups the history by key and rejects what cannot be judged.
func indexList(h ListHistory) (map[string]*keyHist, error) {
	keys := map[string]*keyHist{}
	get := func(k string) *keyHist {
		kh := keys[k]
		if kh == nil {
			kh = &keyHist{appends: map[uint64]int{}}
			keys[k] = kh
		}
		return kh
	}
	for i, a := range h.Appends {
		switch {
		case a.Outcome < AppendUnknown || a.Outcome > AppendFailed:
			return nil, fmt.Errorf("%w: append %d has outcome %v", ErrBadHistory, i, a.Outcome)
		case a.Start.IsZero():
			return nil, fmt.Errorf("%w: append %d (key %q element %d) has no start time", ErrBadHistory, i, a.Key, a.Element)
		case a.Outcome == AppendOK && a.End.IsZero():
			return nil, fmt.Errorf("%w: acknowledged append %d (key %q element %d) has no end time", ErrBadHistory, i, a.Key, a.Element)
		case !a.End.IsZero() && a.End.Before(a.Start):
			return nil, fmt.Errorf("%w: append %d (key %q element %d) ends before it starts", ErrBadHistory, i, a.Key, a.Element)
		}
		kh := get(a.Key)
		if j, dup := kh.appends[a.Element]; dup {
			return nil, fmt.Errorf("%w: appends %d and %d both append element %d to key %q; elements must be unique per key",
				ErrBadHistory, j, i, a.Element, a.Key)
		}
		kh.appends[a.Element] = i
	}
	for i, r := range h.Reads {
		if r.Start.IsZero() || r.End.IsZero() || r.End.Before(r.Start) {
			return nil, fmt.Errorf("%w: read %d of key %q needs a start and an end time, in order", ErrBadHistory, i, r.Key)
		}
		kh := get(r.Key)
		kh.reads = append(kh.reads, i)
	}
	type replicaKey struct{ partition, replica, key string }
	seen := map[replicaKey]int{}
	for i, f := range h.Finals {
		if f.Replica == "" {
			return nil, fmt.Errorf("%w: final list %d of key %q names no replica", ErrBadHistory, i, f.Key)
		}
		rk := replicaKey{f.Partition, f.Replica, f.Key}
		if j, dup := seen[rk]; dup {
			return nil, fmt.Errorf("%w: final lists %d and %d are both key %q on replica %s of partition %s",
				ErrBadHistory, j, i, f.Key, f.Replica, f.Partition)
		}
		seen[rk] = i
		kh := get(f.Key)
		if len(kh.finals) > 0 {
			if other := h.Finals[kh.finals[0]].Partition; other != f.Partition {
				return nil, fmt.Errorf("%w: key %q has final lists in partitions %s and %s", ErrBadHistory, f.Key, other, f.Partition)
			}
		}
		kh.finals = append(kh.finals, i)
	}
	for _, kh := range keys {
		slices.SortFunc(kh.finals, func(a, b int) int { return cmp.Compare(h.Finals[a].Replica, h.Finals[b].Replica) })
	}
	return keys, nil
}

// earliest is the first start time in h, the origin of the relative times
// findings print.
func earliest(h ListHistory) time.Time {
	var t time.Time
	for _, a := range h.Appends {
		if t.IsZero() || a.Start.Before(t) {
			t = a.Start
		}
	}
	for _, r := range h.Reads {
		if t.IsZero() || r.Start.Before(t) {
			t = r.Start
		}
	}
	return t
}

// source is one list of a key: a read or a final list.
type source struct {
	list  []uint64
	read  int // index in Reads, or -1
	final int // index in Finals, or -1
	// prefix: the list is a prefix of the key's longest list; then only
	// its length matters for element-level checks.
	prefix bool
	set    map[uint64]struct{} // the elements of a non-prefix list
}

// keyCheck checks one key.
type keyCheck struct {
	h   *ListHistory
	rep *ListReport
	key string
	*keyHist
	origin time.Time

	srcs    []*source
	longest *source
	pos     map[uint64]int // element -> first index in longest
	// seenAt[i] is the earliest end of a read that saw longest[i].
	seenAt []time.Time
	// outRead maps an element seen by a non-prefix read to the earliest
	// end of such a read.
	outRead map[uint64]time.Time
	// present holds the elements of non-prefix lists; with pos, every
	// element any list holds.
	present map[uint64]struct{}
}

func (c *keyCheck) run() {
	c.collect()
	c.prefixes()
	c.elements()
	c.unknowns()
	c.lost()
	c.divergent()
	c.realTime()
}

// report counts one finding; msg is called only for the findings kept as
// examples, so a badly broken run of a million anomalies checks as fast as
// a clean one.
func (c *keyCheck) report(a Anomaly, elem uint64, msg func() string) {
	c.rep.Counts[a]++
	if c.rep.Counts[a] <= MaxListExamples {
		c.rep.Examples = append(c.rep.Examples, ListFinding{Anomaly: a, Key: c.key, Element: elem, Msg: msg()})
	}
}

// collect gathers the key's lists, final lists first (by replica), and
// picks the longest, the first one of the greatest length: with no
// anomaly, every other list is a prefix of it.
func (c *keyCheck) collect() {
	for _, i := range c.finals {
		c.srcs = append(c.srcs, &source{list: c.h.Finals[i].List, read: -1, final: i})
	}
	for _, i := range c.reads {
		c.srcs = append(c.srcs, &source{list: c.h.Reads[i].List, read: i, final: -1})
	}
	c.longest = &source{read: -1, final: -1, prefix: true}
	for _, s := range c.srcs {
		if len(s.list) > len(c.longest.list) {
			c.longest = s
		}
	}
	c.longest.prefix = true
	c.pos = make(map[uint64]int, len(c.longest.list))
	for i, e := range c.longest.list {
		if _, ok := c.pos[e]; !ok {
			c.pos[e] = i
		}
	}
}

// prefixes classifies each list as a prefix of the longest or not
// (Reordered), and records when reads saw what.
func (c *keyCheck) prefixes() {
	long := c.longest.list
	c.seenAt = make([]time.Time, len(long))
	minEnd := make([]time.Time, len(long)+1) // by prefix length
	for _, s := range c.srcs {
		n := 0
		for n < len(s.list) && s.list[n] == long[n] {
			n++
		}
		if n == len(s.list) {
			s.prefix = true
			if s.read >= 0 {
				if end := c.h.Reads[s.read].End; minEnd[n].IsZero() || end.Before(minEnd[n]) {
					minEnd[n] = end
				}
			}
			continue
		}
		s.set = make(map[uint64]struct{}, len(s.list))
		for _, e := range s.list {
			s.set[e] = struct{}{}
		}
		if c.present == nil {
			c.present, c.outRead = map[uint64]struct{}{}, map[uint64]time.Time{}
		}
		for _, e := range s.list {
			c.present[e] = struct{}{}
			if s.read >= 0 {
				if t, ok := c.outRead[e]; !ok || c.h.Reads[s.read].End.Before(t) {
					c.outRead[e] = c.h.Reads[s.read].End
				}
			}
		}
		// n < len(s.list) <= len(long): both have an element at n.
		c.report(Reordered, 0, func() string {
			return fmt.Sprintf(
				"key %q: %s (%d elements) is not a prefix of %s (%d elements): at index %d it has %d where the other has %d",
				c.key, c.describe(s), len(s.list), c.describe(c.longest), len(long), n, s.list[n], long[n])
		})
	}
	var cur time.Time
	for i := len(long) - 1; i >= 0; i-- {
		if t := minEnd[i+1]; !t.IsZero() && (cur.IsZero() || t.Before(cur)) {
			cur = t
		}
		c.seenAt[i] = cur
	}
}

// has reports whether any list holds e.
func (c *keyCheck) has(e uint64) bool {
	if _, ok := c.pos[e]; ok {
		return true
	}
	_, ok := c.present[e]
	return ok
}

// elements finds Duplicated and Phantom elements. A prefix of the longest
// list holds nothing the longest does not, so only the longest and the
// non-prefix lists are scanned.
func (c *keyCheck) elements() {
	dup, phantom := map[uint64]bool{}, map[uint64]bool{}
	for _, s := range c.scanned() {
		c.duplicates(s, dup)
		c.phantoms(s, phantom)
	}
}

// scanned returns the lists element-level checks must scan.
func (c *keyCheck) scanned() []*source {
	out := []*source{c.longest}
	for _, s := range c.srcs {
		if !s.prefix {
			out = append(out, s)
		}
	}
	return out
}

// duplicates reports elements repeated within s, once per element.
func (c *keyCheck) duplicates(s *source, reported map[uint64]bool) {
	if s.set != nil && len(s.set) == len(s.list) {
		return // no repeats: the set is as long as the list
	}
	seen := make(map[uint64]int, len(s.list))
	for i, e := range s.list {
		j, ok := seen[e]
		if !ok {
			seen[e] = i
			continue
		}
		if !reported[e] {
			reported[e] = true
			c.report(Duplicated, e, func() string {
				return fmt.Sprintf("key %q: element %d appears at indexes %d and %d of %s%s",
					c.key, e, j, i, c.describe(s), c.appendInfo(e))
			})
		}
	}
}

// phantoms reports elements of s nobody appended or whose append failed
// definitely, once per element.
func (c *keyCheck) phantoms(s *source, reported map[uint64]bool) {
	for _, e := range s.list {
		if reported[e] {
			continue
		}
		i, ok := c.appends[e]
		var why string
		switch {
		case !ok:
			why = "no client appended it"
		case c.h.Appends[i].Outcome == AppendFailed:
			why = "its append failed definitely"
		default:
			continue
		}
		reported[e] = true
		c.report(Phantom, e, func() string {
			return fmt.Sprintf("key %q: element %d is in %s but %s%s", c.key, e, c.describe(s), why, c.appendInfo(e))
		})
	}
}

// unknowns resolves appends of unknown outcome: applied iff any list
// holds the element.
func (c *keyCheck) unknowns() {
	for e, i := range c.appends {
		if c.h.Appends[i].Outcome != AppendUnknown {
			continue
		}
		if c.has(e) {
			c.rep.UnknownApplied++
		} else {
			c.rep.UnknownNotApplied++
		}
	}
}

// seen returns the end of the earliest read that saw e (zero if none).
func (c *keyCheck) seen(e uint64) time.Time {
	var t time.Time
	if p, ok := c.pos[e]; ok {
		t = c.seenAt[p]
	}
	if r, ok := c.outRead[e]; ok && (t.IsZero() || r.Before(t)) {
		t = r
	}
	return t
}

// lost checks that every element known to exist is in every final list.
func (c *keyCheck) lost() {
	var must []uint64
	for e, i := range c.appends {
		if o := c.h.Appends[i].Outcome; o == AppendOK || (o == AppendUnknown && !c.seen(e).IsZero()) {
			must = append(must, e)
		}
	}
	if len(c.finals) == 0 {
		c.rep.Unverified += len(must)
		return
	}
	slices.Sort(must)
	finals := c.srcs[:len(c.finals)]
	var missing []string
	for _, e := range must {
		missing = missing[:0]
		for _, f := range finals {
			if !c.holds(f, e) {
				missing = append(missing, c.h.Finals[f.final].Replica)
			}
		}
		if len(missing) == 0 {
			continue
		}
		c.report(Lost, e, func() string {
			return fmt.Sprintf(
				"key %q: element %d (%s%s) is missing from the final list on %d of %d replicas of partition %s: %s",
				c.key, e, c.whyKnown(e), c.appendInfo(e), len(missing), len(finals), c.h.Finals[c.finals[0]].Partition, strings.Join(missing, ", "))
		})
	}
}

// whyKnown says why e must exist.
func (c *keyCheck) whyKnown(e uint64) string {
	if c.h.Appends[c.appends[e]].Outcome == AppendOK {
		return "acknowledged"
	}
	return "outcome unknown, but a read that ended at " + c.rel(c.seen(e)) + " saw it"
}

// holds reports whether list s holds e.
func (c *keyCheck) holds(s *source, e uint64) bool {
	if s.prefix {
		p, ok := c.pos[e]
		return ok && p < len(s.list)
	}
	_, ok := s.set[e]
	return ok
}

// divergent compares the key's final lists across replicas.
func (c *keyCheck) divergent() {
	finals := c.srcs[:len(c.finals)]
	if len(finals) < 2 {
		return
	}
	first := finals[0]
	var diff *source
	for _, f := range finals[1:] {
		if !slices.Equal(f.list, first.list) {
			diff = f
			break
		}
	}
	if diff == nil {
		return
	}
	n := 0
	for n < len(first.list) && n < len(diff.list) && first.list[n] == diff.list[n] {
		n++
	}
	c.report(Divergent, 0, func() string {
		sizes := make([]string, len(finals))
		for i, f := range finals {
			sizes[i] = fmt.Sprintf("%s %d", c.h.Finals[f.final].Replica, len(f.list))
		}
		return fmt.Sprintf(
			"key %q of partition %s: replicas hold different lists (elements per replica: %s); %s and %s first differ at index %d",
			c.key, c.h.Finals[first.final].Partition, strings.Join(sizes, ", "),
			c.h.Finals[first.final].Replica, c.h.Finals[diff.final].Replica, n)
	})
}

// realTime checks that no element precedes one that was known to exist
// (acknowledged, or seen by a read) before the first was invoked: the
// later append cannot have been ordered first by a system that orders
// writes at all. Scanning a list, it keeps the latest invocation among the
// elements so far; an element known to exist before that is out of place.
// A prefix of the longest list has no pair the longest does not, so again
// only the longest and the non-prefix lists are scanned.
func (c *keyCheck) realTime() {
	reported := map[uint64]bool{}
	for _, s := range c.scanned() {
		var latest time.Time // latest invocation so far
		var latestElem uint64
		for _, y := range s.list {
			if known, how := c.known(y); !known.IsZero() && !latest.IsZero() && known.Before(latest) &&
				latestElem != y && !reported[y] {
				reported[y] = true
				c.report(RealTime, y, func() string {
					return fmt.Sprintf(
						"key %q: in %s, element %d (invoked at %s) precedes element %d, which was %s at %s",
						c.key, c.describe(s), latestElem, c.rel(latest), y, how, c.rel(known))
				})
			}
			if i, ok := c.appends[y]; ok && c.h.Appends[i].Start.After(latest) {
				latest, latestElem = c.h.Appends[i].Start, y
			}
		}
	}
}

// known returns when e was first known to exist, and how.
func (c *keyCheck) known(e uint64) (time.Time, string) {
	var t time.Time
	how := ""
	if i, ok := c.appends[e]; ok && c.h.Appends[i].Outcome == AppendOK {
		t, how = c.h.Appends[i].End, "acknowledged"
	}
	if r := c.seen(e); !r.IsZero() && (t.IsZero() || r.Before(t)) {
		t, how = r, "seen by a read that ended"
	}
	return t, how
}

// describe names a list for a finding.
func (c *keyCheck) describe(s *source) string {
	if s.read >= 0 {
		r := c.h.Reads[s.read]
		return fmt.Sprintf("read %d by client %s [%s, %s]", s.read, r.Client, c.rel(r.Start), c.rel(r.End))
	}
	if s.final < 0 {
		return "no list"
	}
	f := c.h.Finals[s.final]
	return fmt.Sprintf("the final list on replica %s of partition %s", f.Replica, f.Partition)
}

// appendInfo describes e's append, if there is one.
func (c *keyCheck) appendInfo(e uint64) string {
	i, ok := c.appends[e]
	if !ok {
		return ""
	}
	a := c.h.Appends[i]
	end := "?"
	if !a.End.IsZero() {
		end = c.rel(a.End)
	}
	return fmt.Sprintf("; appended by client %s [%s, %s], outcome %s", a.Client, c.rel(a.Start), end, a.Outcome)
}

// rel prints t relative to the history's first operation.
func (c *keyCheck) rel(t time.Time) string { return "t+" + t.Sub(c.origin).String() }
