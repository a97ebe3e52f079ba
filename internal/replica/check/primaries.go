package check

import (
	"fmt"
	"slices"
	"time"
)

// StatusSample is what one node said about one partition in one sampling
// round (an observer asks every node directly every ~100 ms, so a
// partition between nodes does not hide either's view).
type StatusSample struct {
	Round     int
	At        time.Time
	Node      string
	Partition string
	// Primary is the node's claim to be the partition's primary.
	Primary bool
	// LeaseKnown marks nodes that report a lease; then LeaseValid says
	// whether the claim is backed by an unexpired lease. Without leases
	// every primary claim counts.
	LeaseKnown, LeaseValid bool
}

// PrimaryMoments is what TwoPrimaries found.
type PrimaryMoments struct {
	// Rounds is the number of sampling rounds; Double the rounds in which
	// some partition had two or more (leased, where leases are known)
	// primaries; Longest the longest run of such rounds, as time.
	Rounds, Double int
	Longest        time.Duration
	Example        string
	// Claimed counts rounds in which two nodes claimed a partition, leases
	// or not: the announcements a heal must settle (informational).
	Claimed int
}

// TwoPrimaries counts sampling rounds in which two nodes claimed to be
// the primary of the same partition at once (with valid leases, where the
// nodes report leases).
func TwoPrimaries(samples []StatusSample) PrimaryMoments {
	type key struct {
		round int
		part  string
	}
	claims := map[key][]string{}
	anyClaims := map[key]int{}
	at := map[int]time.Time{}
	for _, s := range samples {
		if _, ok := at[s.Round]; !ok || s.At.Before(at[s.Round]) {
			at[s.Round] = s.At
		}
		if s.Primary {
			anyClaims[key{s.Round, s.Partition}]++
		}
		if s.Primary && (!s.LeaseKnown || s.LeaseValid) {
			k := key{s.Round, s.Partition}
			claims[k] = append(claims[k], s.Node)
		}
	}
	rounds := make([]int, 0, len(at))
	for r := range at {
		rounds = append(rounds, r)
	}
	slices.Sort(rounds)
	double := map[int]bool{}
	var m PrimaryMoments
	m.Rounds = len(rounds)
	claimed := map[int]bool{}
	for k, n := range anyClaims {
		if n > 1 && !claimed[k.round] {
			claimed[k.round] = true
			m.Claimed++
		}
	}
	for k, nodes := range claims {
		if len(nodes) > 1 {
			if !double[k.round] {
				m.Double++
			}
			double[k.round] = true
			if m.Example == "" || at[k.round].Before(exampleAt(m.Example, at)) {
				slices.Sort(nodes)
				m.Example = fmt.Sprintf("round %d: partition %s claimed by %v", k.round, k.part, nodes)
			}
		}
	}
	var runStart time.Time
	for i, r := range rounds {
		if !double[r] {
			runStart = time.Time{}
			continue
		}
		if runStart.IsZero() {
			runStart = at[r]
		}
		end := at[r]
		if i+1 < len(rounds) {
			end = at[rounds[i+1]]
		}
		m.Longest = max(m.Longest, end.Sub(runStart))
	}
	return m
}

func exampleAt(example string, at map[int]time.Time) time.Time {
	var r int
	fmt.Sscanf(example, "round %d:", &r)
	return at[r]
}

// LSNCollisions finds two different acknowledged writes of one partition
// that were given the same LSN: only two primaries acknowledging at once
// (or a log that forked) produce it. writes are acknowledged writes with
// Version their LSN and Session naming the write (unique per write).
func LSNCollisions(writes []Op) []Violation {
	type key struct {
		part string
		lsn  uint64
	}
	first := map[key]Op{}
	var vs []Violation
	for _, w := range writes {
		if w.Kind != Write || w.Version == 0 {
			continue
		}
		k := key{w.Partition, w.Version}
		if f, ok := first[k]; ok && f.Session != w.Session {
			vs = append(vs, Violation{Rule: "two-primaries", Op: w, Msg: fmt.Sprintf(
				"writes %s and %s of %s were both acknowledged at LSN %d", f.Session, w.Session, w.Partition, w.Version)})
			continue
		}
		first[k] = w
	}
	return vs
}

// LSNOrder finds acknowledged writes of one partition whose LSNs disagree
// with real time: write b started after write a was acknowledged, yet b's
// LSN is lower. One primary orders its log, and a new primary continues
// from every committed entry, so only a second primary acknowledging from
// a log without a (or a log that lost a) produces it. writes are
// acknowledged writes with Version their LSN; one violation per b.
func LSNOrder(writes []Op) []Violation {
	byPart := map[string][]Op{}
	for _, w := range writes {
		if w.Kind == Write && w.Version > 0 {
			byPart[w.Partition] = append(byPart[w.Partition], w)
		}
	}
	var vs []Violation
	for _, part := range sortedParts(byPart) {
		ws := byPart[part]
		byEnd := slices.Clone(ws)
		slices.SortFunc(byEnd, func(a, b Op) int { return a.End.Compare(b.End) })
		slices.SortFunc(ws, func(a, b Op) int { return a.Start.Compare(b.Start) })
		var top Op // the highest-LSN write acknowledged so far
		i := 0
		for _, b := range ws {
			for ; i < len(byEnd) && byEnd[i].End.Before(b.Start); i++ {
				if byEnd[i].Version > top.Version {
					top = byEnd[i]
				}
			}
			if b.Version < top.Version {
				vs = append(vs, Violation{Rule: "lsn-order", Op: b, Msg: fmt.Sprintf(
					"%s: write %s got LSN %d, though write %s had been acknowledged at LSN %d %v before it started",
					part, b.Session, b.Version, top.Session, top.Version, b.Start.Sub(top.End).Round(time.Millisecond))})
			}
		}
	}
	return vs
}

func sortedParts(m map[string][]Op) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
