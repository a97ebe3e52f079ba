package check

import (
	"fmt"
	"slices"
	"time"
)

// StaleBeyondBound checks level 3's staleness bound x from the client's
// side alone: a read that started at s and returned version v is stale
// beyond the bound if some write acknowledged at a <= s - x had an LSN
// greater than v. Unlike Staleness it needs no timeline of the primary,
// only write acknowledgements (Kind Write, Version its LSN) and reads from
// clients that share one clock. Each violation's message says how far
// beyond the bound the read was.
func StaleBeyondBound(ops []Op, x time.Duration) []Violation {
	type ack struct {
		at  time.Time
		lsn uint64
	}
	writes := map[string][]ack{}
	for _, o := range ops {
		if o.Kind == Write && o.Version > 0 {
			writes[o.Partition] = append(writes[o.Partition], ack{o.End, o.Version})
		}
	}
	// Per partition: acks by time with the running maximum LSN.
	for p, ws := range writes {
		slices.SortFunc(ws, func(a, b ack) int { return a.at.Compare(b.at) })
		for i := 1; i < len(ws); i++ {
			ws[i].lsn = max(ws[i].lsn, ws[i-1].lsn)
		}
		writes[p] = ws
	}
	var vs []Violation
	for _, o := range ops {
		if o.Kind != Read {
			continue
		}
		ws := writes[o.Partition]
		cut := o.Start.Add(-x)
		i, _ := slices.BinarySearchFunc(ws, cut, func(a ack, t time.Time) int {
			if a.at.After(t) {
				return 1
			}
			return -1
		})
		if i == 0 || ws[i-1].lsn <= o.Version {
			continue
		}
		// The first acknowledgement that made the read stale.
		j, _ := slices.BinarySearchFunc(ws[:i], o.Version, func(a ack, v uint64) int {
			if a.lsn > v {
				return 1
			}
			return -1
		})
		late := o.Start.Sub(ws[j].at) - x
		vs = append(vs, Violation{Rule: "staleness", Op: o, Beyond: late, Msg: fmt.Sprintf(
			"%s read %s at version %d; version %d was acknowledged %v before the read started, %v beyond the bound %v",
			o.Session, o.Partition, o.Version, ws[i-1].lsn, o.Start.Sub(ws[j].at).Round(time.Millisecond), late.Round(time.Millisecond), x)})
	}
	return vs
}

// MaxBeyond is the largest amount by which any read of ops exceeded the
// staleness bound x (for reports; 0 if none did).
func MaxBeyond(ops []Op, x time.Duration) time.Duration {
	var worst time.Duration
	for _, v := range StaleBeyondBound(ops, x) {
		worst = max(worst, v.Beyond)
	}
	return worst
}
