package replica

// Level 3: the versions a fresh read may be served at.

import "time"

// versionAgo is the primary's commit point Staleness ago: the newest
// recorded commit at or before now-x, or the oldest known one.
func (r *Replica) versionAgo(now time.Time) LSN {
	cut := now.Add(-r.cfg.Staleness)
	v := LSN(0)
	for i, h := range r.history {
		if i == 0 || !h.at.After(cut) {
			v = h.lsn
		}
	}
	return v
}

func (r *Replica) pruneHistory(now time.Time) {
	cut := now.Add(-r.cfg.Staleness)
	i := 0
	for i+1 < len(r.history) && !r.history[i+1].at.After(cut) {
		i++
	}
	r.history = r.history[i:]
}
