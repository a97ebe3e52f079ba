package membership

import "time"

// PollHealth tracks replicas that leave load polls unanswered. A replica
// that misses Misses polls in a row is not offered for Suspend, so a dead
// node stops costing every call that polls it the whole discard deadline
// while membership has yet to notice. A slow one is not suspended: its
// late answer (Heard) shows it alive, and taking alive replicas out of
// the choice herded the calls onto the rest when nodes under a CPU quota
// answered after the deadline.
//
// It is pure (time passed in) and not safe for concurrent use.
type PollHealth struct {
	Misses  int
	Suspend time.Duration

	missed    map[string]int
	suspended map[string]time.Time
}

// NewPollHealth returns a tracker suspending after misses unanswered polls
// in a row for suspend.
func NewPollHealth(misses int, suspend time.Duration) *PollHealth {
	return &PollHealth{Misses: misses, Suspend: suspend, missed: map[string]int{}, suspended: map[string]time.Time{}}
}

// Observe records which of the polled replicas answered in time.
func (h *PollHealth) Observe(now time.Time, polled []string, answered func(string) bool) {
	for _, id := range polled {
		if answered(id) {
			delete(h.missed, id)
			continue
		}
		h.missed[id]++
		if h.missed[id] >= h.Misses {
			delete(h.missed, id)
			h.suspended[id] = now.Add(h.Suspend)
		}
	}
}

// Filter returns the replicas not currently suspended, or all of them if
// every one is: a suspect is still better than no replica.
func (h *PollHealth) Filter(now time.Time, ids []string) []string {
	if len(h.suspended) == 0 {
		return ids
	}
	kept := make([]string, 0, len(ids))
	for _, id := range ids {
		if until, ok := h.suspended[id]; ok {
			if now.Before(until) {
				continue
			}
			delete(h.suspended, id)
		}
		kept = append(kept, id)
	}
	if len(kept) == 0 {
		return ids
	}
	return kept
}

// Heard records an answer from id that came too late for its poll (or a
// probe's or a push): id is alive, so its misses and any suspension end.
func (h *PollHealth) Heard(id string) {
	delete(h.missed, id)
	delete(h.suspended, id)
}
