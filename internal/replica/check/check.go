// Package check verifies recorded client histories against Neptune's
// consistency guarantees: level 3's session guarantees (read-your-writes,
// monotonic reads) and staleness bound, and every level's convergence and
// durability of acknowledged writes. Tests and integration runs record
// operations and feed them here; nothing here depends on how they ran.
package check

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Kind is an operation's access mode.
type Kind int

const (
	Read Kind = iota
	Write
)

func (k Kind) String() string {
	if k == Write {
		return "write"
	}
	return "read"
}

// Op is one completed client operation.
type Op struct {
	Session   string
	Kind      Kind
	Partition string
	// Version is what the call returned: the version that served a read, or
	// the LSN of a write.
	Version    uint64
	Start, End time.Time
}

// Violation is one broken guarantee.
type Violation struct {
	Rule string // "read-your-writes", "monotonic-reads", "staleness", "convergence", "durability"
	Op   Op
	Msg  string
	// Beyond (StaleBeyondBound) is how far beyond the bound the read was.
	Beyond time.Duration
}

func (v Violation) String() string { return v.Rule + ": " + v.Msg }

// Sessions checks read-your-writes and monotonic reads: a read must return
// at least the version of every write and read of the same session and
// partition that completed before the read started.
func Sessions(ops []Op) []Violation {
	type key struct{ session, partition string }
	groups := map[key][]Op{}
	for _, o := range ops {
		k := key{o.Session, o.Partition}
		groups[k] = append(groups[k], o)
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.session, b.session), cmp.Compare(a.partition, b.partition))
	})
	var vs []Violation
	for _, k := range keys {
		g := groups[k]
		byEnd := slices.Clone(g)
		slices.SortStableFunc(byEnd, func(a, b Op) int { return a.End.Compare(b.End) })
		reads := slices.Clone(g)
		slices.SortStableFunc(reads, func(a, b Op) int { return a.Start.Compare(b.Start) })
		// Sweep reads by start time; fold in ops that ended before each.
		var maxW, maxR Op
		i := 0
		for _, r := range reads {
			if r.Kind != Read {
				continue
			}
			for ; i < len(byEnd) && byEnd[i].End.Before(r.Start); i++ {
				if o := byEnd[i]; o.Kind == Write && o.Version > maxW.Version {
					maxW = o
				} else if o.Kind == Read && o.Version > maxR.Version {
					maxR = o
				}
			}
			if r.Version < maxW.Version {
				vs = append(vs, Violation{Rule: "read-your-writes", Op: r, Msg: fmt.Sprintf(
					"session %s read version %d of %s after its write at version %d", r.Session, r.Version, r.Partition, maxW.Version)})
			}
			if r.Version < maxR.Version {
				vs = append(vs, Violation{Rule: "monotonic-reads", Op: r, Msg: fmt.Sprintf(
					"session %s read version %d of %s after reading version %d", r.Session, r.Version, r.Partition, maxR.Version)})
			}
		}
	}
	return vs
}

// Point is the primary's committed version from At on.
type Point struct {
	At      time.Time
	Version uint64
}

// Timeline is a partition's primary version over time, in time order.
type Timeline []Point

// At returns the primary's version at t (0 before the first point).
func (tl Timeline) At(t time.Time) uint64 {
	i := sort.Search(len(tl), func(i int) bool { return tl[i].At.After(t) })
	if i == 0 {
		return 0
	}
	return tl[i-1].Version
}

// Staleness checks level 3's bound: each read's version is no older than
// the primary's version at (read start - x - eps). eps absorbs the
// announcement delay that makes the paper call the bound soft.
func Staleness(ops []Op, primary map[string]Timeline, x, eps time.Duration) []Violation {
	var vs []Violation
	for _, o := range ops {
		if o.Kind != Read {
			continue
		}
		at := o.Start.Add(-x - eps)
		if need := primary[o.Partition].At(at); o.Version < need {
			vs = append(vs, Violation{Rule: "staleness", Op: o, Msg: fmt.Sprintf(
				"read of %s at %s returned version %d; the primary had %d at %s (x=%v, eps=%v)",
				o.Partition, o.Start.Format(time.RFC3339Nano), o.Version, need, at.Format(time.RFC3339Nano), x, eps)})
		}
	}
	return vs
}

// Convergence checks that every replica ended in the same state, given a
// digest of each replica's state (for level 1, of an order-independent
// form such as the sorted set of writes).
func Convergence(digests map[string]string) []Violation {
	ids := make([]string, 0, len(digests))
	for id := range digests {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var vs []Violation
	for _, id := range ids[min(1, len(ids)):] {
		if digests[id] != digests[ids[0]] {
			vs = append(vs, Violation{Rule: "convergence", Msg: fmt.Sprintf("replica %s state %q differs from %s's %q",
				id, digests[id], ids[0], digests[ids[0]])})
		}
	}
	return vs
}

// Durability checks that every acknowledged write is present on every
// replica; present[replica] is the set of writes its final state holds.
func Durability(acked []string, present map[string]map[string]bool) []Violation {
	ids := make([]string, 0, len(present))
	for id := range present {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var vs []Violation
	for _, w := range acked {
		for _, id := range ids {
			if !present[id][w] {
				vs = append(vs, Violation{Rule: "durability", Msg: fmt.Sprintf("acknowledged write %s lost at replica %s", w, id)})
			}
		}
	}
	return vs
}
