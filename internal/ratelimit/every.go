package ratelimit

import (
	"sync"
	"time"
)

// Every admits at most one event per key per interval and counts the
// events it held back in between: rate-limited logging, where each line
// that is written says how many like it were not. Time is passed in. It is
// safe for concurrent use.
type Every struct {
	interval time.Duration

	mu    sync.Mutex
	keys  map[string]*every
	swept time.Time
}

type every struct {
	last       time.Time
	suppressed uint64
}

// overflowKey stands for every key beyond MaxPeers: a flood of distinct
// sources shares one line per interval instead of writing one each.
const overflowKey = "\x00overflow"

// NewEvery admits one event per key per interval.
func NewEvery(interval time.Duration) *Every {
	return &Every{interval: interval, keys: map[string]*every{}}
}

// Allow reports whether an event for key at now is admitted and, if it
// is, how many events for key were held back since the last one admitted.
func (e *Every) Allow(key string, now time.Time) (ok bool, suppressed uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if now.Sub(e.swept) > e.interval || len(e.keys) >= MaxPeers {
		e.sweep(now)
	}
	st, found := e.keys[key]
	if !found {
		if len(e.keys) >= MaxPeers {
			key = overflowKey
			st, found = e.keys[key]
		}
		if !found {
			e.keys[key] = &every{last: now}
			return true, 0
		}
	}
	if now.Sub(st.last) < e.interval {
		st.suppressed++
		return false, 0
	}
	suppressed, st.suppressed, st.last = st.suppressed, 0, now
	return true, suppressed
}

// sweep forgets keys idle for an interval with nothing held back: their
// next event is admitted either way.
func (e *Every) sweep(now time.Time) {
	e.swept = now
	for k, st := range e.keys {
		if st.suppressed == 0 && now.Sub(st.last) >= e.interval {
			delete(e.keys, k)
		}
	}
}
