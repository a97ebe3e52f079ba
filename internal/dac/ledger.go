package dac

import (
	"sync"
	"time"
)

// Ledger is a node's aggregation load index (§4.5): the work it has
// committed to for the aggregations in flight, the sum over them of
// RequestLoad (s + π·a) less what is done, with s and a the node's running
// means of its local and reduction costs. Queue length alone misses the
// reductions a node owes for children whose results have not arrived yet,
// which is most of an interior LAT node's work. The zero value is an empty
// ledger whose means are 0 until first measured (so the first calls commit
// nothing for them); the first measurement sets a mean outright. Safe for
// concurrent use.
type Ledger struct {
	mu            sync.Mutex
	pending       time.Duration
	local, reduce time.Duration // running means; 0 until first measured
}

// ledgerWeight is the weight of one measured cost in the running means.
const ledgerWeight = 0.05

// Pending is the load index: committed work not yet done.
func (l *Ledger) Pending() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending
}

// Means returns the running means of local and reduction costs.
func (l *Ledger) Means() (local, reduce time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.local, l.reduce
}

// Commit records a call that will run its local operator here (if local)
// and reduce the results of children into it: s·[local] + π·a at the
// current means, with π one per child, or one less without a local result
// to reduce into (a coordinator).
func (l *Ledger) Commit(local bool, children int) *Commitment {
	l.mu.Lock()
	defer l.mu.Unlock()
	reductions := children
	if !local {
		reductions = max(children-1, 0)
	}
	c := &Commitment{l: l, reduce: l.reduce, reductions: reductions}
	if local {
		c.local, c.locals = l.local, 1
	}
	l.pending += time.Duration(c.locals)*c.local + time.Duration(c.reductions)*c.reduce
	return c
}

// Commitment is one call's outstanding share of a Ledger. Its methods are
// safe for concurrent use.
type Commitment struct {
	l                  *Ledger
	local, reduce      time.Duration // the means at commit time, subtracted as work is done
	locals, reductions int
}

// LocalDone records the local operator finished; cost (0 if it did not
// run) updates the mean.
func (c *Commitment) LocalDone(cost time.Duration) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.locals > 0 {
		c.locals--
		c.l.pending -= c.local
	}
	if cost > 0 {
		c.l.local = ewma(c.l.local, cost)
	}
}

// ReduceDone records one reduction finished; cost (0 if it did not run)
// updates the mean.
func (c *Commitment) ReduceDone(cost time.Duration) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.reductions > 0 {
		c.reductions--
		c.l.pending -= c.reduce
	}
	if cost > 0 {
		c.l.reduce = ewma(c.l.reduce, cost)
	}
}

// Release drops whatever the call still owes: it sent its result, and
// reductions for children that never answered will not run.
func (c *Commitment) Release() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.l.pending -= time.Duration(c.locals)*c.local + time.Duration(c.reductions)*c.reduce
	c.locals, c.reductions = 0, 0
}

func ewma(old, x time.Duration) time.Duration {
	if old == 0 {
		return x
	}
	return time.Duration((1-ledgerWeight)*float64(old) + ledgerWeight*float64(x))
}
