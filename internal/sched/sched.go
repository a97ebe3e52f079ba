// Package sched decides which queued request a node serves next. Schedulers
// are pure: the dispatcher passes the time in and runs what they return, so
// the node and the lab's simulator (lab/sim/schedsim) share them.
package sched

import "time"

// Request is one queued request as the scheduler sees it.
type Request struct {
	// Class is the service class; empty means the default class.
	Class string
	// Arrival is when the request entered the queue.
	Arrival time.Time
	// Deadline is when the caller stops waiting; zero means none. A request
	// still queued at its deadline is dropped instead of run.
	Deadline time.Time
	// Value is the dispatcher's payload, opaque to the scheduler.
	Value any

	state classState // ClassScheduler's bookkeeping
}

// Scheduler orders the queued requests of one service on one node.
// Implementations are not safe for concurrent use.
type Scheduler interface {
	// Push queues r.
	Push(now time.Time, r *Request)
	// Pop returns the request to run next (nil if none is runnable) and the
	// requests it dropped because they can no longer be useful.
	Pop(now time.Time) (next *Request, dropped []*Request)
	// Finish reports that r ran for used (its resource use).
	Finish(now time.Time, r *Request, used time.Duration)
	// Abandon reports that r, which Pop returned, never ran: its caller
	// gave up first. Every popped request gets exactly one Finish or
	// Abandon.
	Abandon(now time.Time, r *Request)
	// Len is the number of queued requests.
	Len() int
}

// FIFO serves requests in arrival order and drops those whose deadline
// passed while they waited.
type FIFO struct {
	q    []*Request
	head int
}

// NewFIFO returns an empty FIFO scheduler.
func NewFIFO() *FIFO { return &FIFO{} }

// Push appends r.
func (f *FIFO) Push(_ time.Time, r *Request) { f.q = append(f.q, r) }

// Pop returns the oldest request whose deadline has not passed.
func (f *FIFO) Pop(now time.Time) (*Request, []*Request) {
	var dropped []*Request
	for f.head < len(f.q) {
		r := f.q[f.head]
		f.q[f.head] = nil
		f.head++
		if !r.Deadline.IsZero() && !now.Before(r.Deadline) {
			dropped = append(dropped, r)
			continue
		}
		f.compact()
		return r, dropped
	}
	f.compact()
	return nil, dropped
}

// compact reclaims the consumed prefix so the slice does not grow forever.
func (f *FIFO) compact() {
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
		return
	}
	if f.head > 64 && f.head*2 > len(f.q) {
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
}

// Finish is a no-op: FIFO keeps no usage history.
func (f *FIFO) Finish(time.Time, *Request, time.Duration) {}

// Abandon is a no-op: FIFO keeps no usage history.
func (f *FIFO) Abandon(time.Time, *Request) {}

// Len returns the number of queued requests.
func (f *FIFO) Len() int { return len(f.q) - f.head }
