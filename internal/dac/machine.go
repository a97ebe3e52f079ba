package dac

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// ErrUnexpected means a shell stepped a Machine with an event it cannot
// have produced: a result from a node that is not a child, a second result
// from the same child, or a reduction or local result nobody asked for.
var ErrUnexpected = errors.New("dac: unexpected event")

// Partial is a partial aggregation result: reduced data and the partitions
// that contributed to it.
type Partial struct {
	Partitions []int
	Data       any
}

// EventKind says what happened to a Machine.
type EventKind int

const (
	// LocalDone: the local operator finished (Data, or Err).
	LocalDone EventKind = iota + 1
	// ChildDone: a child's partial result arrived (From, Partial).
	ChildDone
	// ReduceDone: a reduction asked for by RunReduce finished (Seq, Data,
	// or Err).
	ReduceDone
	// Timeout: the timer set by SetTimer fired.
	Timeout
)

// Event is one input to Machine.Step.
type Event struct {
	Kind    EventKind
	From    int
	Seq     int
	Data    any
	Partial Partial
	// Err reports a failed operator; its inputs drop out of the result.
	Err error
}

// ActionKind says what a Machine asks its shell to do.
type ActionKind int

const (
	// RunLocal: run the local operator on this node's partition and report
	// LocalDone. The shell may skip it once the Machine is Closed.
	RunLocal ActionKind = iota + 1
	// RunReduce: reduce A and B and report ReduceDone with Seq. The node
	// serves these before new local work: they finish requests.
	RunReduce
	// SetTimer: report Timeout at At.
	SetTimer
	// Send: deliver Partial to the parent (or return it to the caller).
	Send
	// Progress (only with MachineConfig.Progress): Partial is the largest
	// reduced result in hand, larger than any reported before; the shell
	// may show it to the caller of a streaming aggregation. It is not the
	// answer: Send still follows.
	Progress
)

// Action is one output of a Machine.
type Action struct {
	Kind    ActionKind
	Seq     int
	A, B    any
	At      time.Time
	Partial Partial
}

// MachineConfig describes one node's part in one aggregation.
type MachineConfig struct {
	// Partition is the partition this node's local operator covers.
	Partition int
	// Local is false for the Caller, which reduces but has no partition.
	Local bool
	// Children are the tree nodes whose results this node reduces.
	Children []int
	// Deadline is when the node stops taking input; zero means never.
	Deadline time.Time
	// Grace is how long past Deadline the node may spend finishing the
	// reductions already handed out before it sends what it has without
	// them. Zero sends at Deadline.
	Grace time.Duration
	// Progress asks for a Progress action whenever the largest reduced
	// result in hand covers more partitions than any reported before
	// (the top of a streaming aggregation).
	Progress bool
}

// Machine is the event-driven aggregation state of one node for one call
// (§4.3, Fig 11): it asks for the local operator, waits for its children
// without holding a worker, asks for a reduction as soon as two partial
// results are at hand, and sends one partial result to its parent when all
// inputs are reduced or the deadline fires. After the deadline it accepts
// no new input but may finish the reductions in hand for up to Grace: the
// deadline is soft, and a reduction running at the deadline usually holds
// most of the result.
//
// The shell feeds Step and drains Ready, in the style of go.etcd.io/raft.
// A Machine is not safe for concurrent use.
type Machine struct {
	cfg          MachineConfig
	localPending bool
	waiting      map[int]bool // child → result not yet arrived
	missing      int          // children whose result has not arrived
	ready        []Partial
	inflight     map[int][2]Partial // reduction seq → its inputs
	seq          int
	closed, sent bool
	expired      bool // the grace period ended too
	reported     int  // partitions in the last Progress
	out          []Action
}

// NewMachine returns the machine with its first actions (RunLocal and
// SetTimer) ready.
func NewMachine(c MachineConfig) *Machine {
	m := &Machine{
		cfg:          c,
		localPending: c.Local,
		waiting:      make(map[int]bool, len(c.Children)),
		inflight:     make(map[int][2]Partial),
	}
	for _, ch := range c.Children {
		m.waiting[ch] = true
	}
	m.missing = len(m.waiting)
	if c.Local {
		m.out = append(m.out, Action{Kind: RunLocal})
	}
	if !c.Deadline.IsZero() {
		m.out = append(m.out, Action{Kind: SetTimer, At: c.Deadline})
	}
	m.advance()
	return m
}

// Ready returns the actions produced since the last call and forgets them.
func (m *Machine) Ready() []Action {
	out := m.out
	m.out = nil
	return out
}

// Closed reports whether the machine takes no more input: it timed out or
// sent its result. A queued local operator for it need not run.
func (m *Machine) Closed() bool { return m.closed }

// Done reports whether the machine has sent its result.
func (m *Machine) Done() bool { return m.sent }

// Step applies one event. Events after Done, and results arriving after the
// deadline, are normal in a distributed call and are dropped silently.
func (m *Machine) Step(ev Event) error {
	if m.sent {
		return nil
	}
	switch ev.Kind {
	case LocalDone:
		if !m.localPending {
			return fmt.Errorf("%w: local result without RunLocal", ErrUnexpected)
		}
		m.localPending = false
		if !m.closed && ev.Err == nil {
			m.ready = append(m.ready, Partial{Partitions: []int{m.cfg.Partition}, Data: ev.Data})
		}
	case ChildDone:
		w, ok := m.waiting[ev.From]
		if !ok || !w {
			return fmt.Errorf("%w: result from %d, not an awaited child", ErrUnexpected, ev.From)
		}
		m.waiting[ev.From] = false
		m.missing--
		// An empty partial (a subtree that timed out with nothing) has
		// nothing to reduce; reducing it would hand operators no data.
		if !m.closed && len(ev.Partial.Partitions) > 0 {
			m.ready = append(m.ready, ev.Partial)
		}
	case ReduceDone:
		in, ok := m.inflight[ev.Seq]
		if !ok {
			return fmt.Errorf("%w: reduction %d was not asked for", ErrUnexpected, ev.Seq)
		}
		delete(m.inflight, ev.Seq)
		if ev.Err == nil {
			m.ready = append(m.ready, Partial{Partitions: slices.Concat(in[0].Partitions, in[1].Partitions), Data: ev.Data})
		}
	case Timeout:
		switch {
		case m.closed:
			m.expired = true
		case len(m.inflight) > 0 && m.cfg.Grace > 0:
			m.closed = true
			m.out = append(m.out, Action{Kind: SetTimer, At: m.cfg.Deadline.Add(m.cfg.Grace)})
		default:
			m.closed, m.expired = true, true
		}
	default:
		return fmt.Errorf("%w: kind %d", ErrUnexpected, ev.Kind)
	}
	m.advance()
	return nil
}

func (m *Machine) advance() {
	for len(m.ready) >= 2 && !m.expired {
		a, b := m.ready[0], m.ready[1]
		m.ready = m.ready[2:]
		m.seq++
		m.inflight[m.seq] = [2]Partial{a, b}
		m.out = append(m.out, Action{Kind: RunReduce, Seq: m.seq, A: a.Data, B: b.Data})
	}
	if !m.expired && (len(m.inflight) > 0 || !(m.closed || m.complete())) {
		if p := m.largest(); m.cfg.Progress && len(p.Partitions) > m.reported {
			m.reported = len(p.Partitions)
			m.out = append(m.out, Action{Kind: Progress, Partial: p})
		}
		return
	}
	p := m.largest()
	m.ready = nil
	m.closed, m.sent = true, true
	m.out = append(m.out, Action{Kind: Send, Partial: p})
}

// largest is the partial in hand with the most partitions: a ready one
// or an input of a running reduction (at expiry one of those may hold
// most of the subtree); the first of equals in seq order.
func (m *Machine) largest() Partial {
	cands := slices.Clone(m.ready) // at most one, unless expired
	for _, seq := range slices.Sorted(maps.Keys(m.inflight)) {
		in := m.inflight[seq]
		cands = append(cands, in[0], in[1])
	}
	var p Partial
	for _, r := range cands {
		if len(r.Partitions) > len(p.Partitions) {
			p = r
		}
	}
	return p
}

// complete reports whether every input has arrived.
func (m *Machine) complete() bool {
	return !m.localPending && m.missing == 0
}
