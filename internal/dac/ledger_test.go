package dac

import (
	"testing"
	"time"
)

func TestLedgerCountsOwedReductions(t *testing.T) {
	const ms = time.Millisecond
	var l Ledger
	warm := l.Commit(true, 1)
	if got := l.Pending(); got != 0 {
		t.Fatalf("pending before any measurement = %v, want 0", got)
	}
	warm.LocalDone(25 * ms) // the first measurements set the means
	warm.ReduceDone(5 * ms)
	warm.Release()
	leaf := l.Commit(true, 0)
	interior := l.Commit(true, 3)
	caller := l.Commit(false, 3) // a coordinator: no local result, so 2 reductions for 3 children
	if got, want := l.Pending(), 25*ms+(25+15)*ms+10*ms; got != want {
		t.Fatalf("pending after commits = %v, want %v", got, want)
	}
	leaf.LocalDone(25 * ms)
	leaf.LocalDone(25 * ms) // a second report of the same local owes nothing
	interior.ReduceDone(5 * ms)
	if got, want := l.Pending(), (25+10)*ms+10*ms; got != want {
		t.Fatalf("pending after work = %v, want %v", got, want)
	}
	interior.Release() // two children never answered
	caller.ReduceDone(0)
	caller.Release()
	leaf.Release()
	if got := l.Pending(); got != 0 {
		t.Fatalf("pending after every release = %v, want 0", got)
	}
}

func TestLedgerMeansFollowMeasuredCosts(t *testing.T) {
	const ms = time.Millisecond
	var l Ledger
	c := l.Commit(true, 1)
	c.LocalDone(ms)
	c.ReduceDone(ms)
	c.Release()
	for range 200 {
		c := l.Commit(true, 1)
		c.LocalDone(40 * ms)
		c.ReduceDone(8 * ms)
		c.Release()
	}
	local, reduce := l.Means()
	if local < 39*ms || local > 40*ms || reduce < 7900*time.Microsecond || reduce > 8*ms {
		t.Fatalf("means = %v, %v; want about 40ms, 8ms", local, reduce)
	}
	if got := l.Pending(); got != 0 {
		t.Fatalf("pending = %v, want 0: each commitment subtracts what it added, whatever the means became", got)
	}
	// A commitment made now uses the measured means.
	c = l.Commit(true, 2)
	if got := l.Pending(); got < 55*ms || got > 56*ms {
		t.Fatalf("pending of s + 2a = %v, want about 56ms", got)
	}
	c.Release()
}
