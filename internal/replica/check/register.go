package check

import (
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// RegisterOp is one put or get of a key-value register, as a client saw it.
// Every put writes a value no other put writes, so a get's value names the
// write it observed.
type RegisterOp struct {
	Key string
	// Put is true for a write of Value; false for a get that returned Value
	// ("" when the key was absent).
	Put   bool
	Value string
	// Outcome: AppendOK (acknowledged; a get returned), AppendFailed (never
	// executed: dropped from the history) or AppendUnknown (a put that may
	// have run: it may take effect at any time after its start; an unknown
	// get says nothing and is dropped).
	Outcome    AppendOutcome
	Start, End time.Time
	Client     string
}

// RegisterReport is the linearizability verdict of a register history,
// checked key by key (a history is linearizable iff each key's is).
type RegisterReport struct {
	Keys, Ops int
	// NonLinearizable lists the keys whose history has no linearization;
	// Timeouts the keys the search gave up on (neither verdict).
	NonLinearizable, Timeouts []string
	// Example describes the first non-linearizable key's operations
	// around the anomaly (bounded).
	Example string
}

// Valid reports that every key's history is linearizable.
func (r *RegisterReport) Valid() bool { return len(r.NonLinearizable) == 0 }

// registerInput is a porcupine operation's input.
type registerInput struct {
	put   bool
	value string
}

// registerModel is a single register (the key's value, "" when absent);
// histories are split by key before they reach it.
var registerModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(registerInput)
		if in.put {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(registerInput)
		if in.put {
			return fmt.Sprintf("put(%q)", in.value)
		}
		return fmt.Sprintf("get() -> %q", output)
	},
}

// Register checks a register history for linearizability with Porcupine,
// one key at a time, each key's search bounded by perKey (0: 10 s). A put
// of unknown outcome is open-ended: it may take effect any time after it
// started, or never.
func Register(ops []RegisterOp, perKey time.Duration) *RegisterReport {
	if perKey <= 0 {
		perKey = 10 * time.Second
	}
	byKey := map[string][]RegisterOp{}
	for _, o := range ops {
		if o.Outcome == AppendFailed || (!o.Put && o.Outcome != AppendOK) {
			continue
		}
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rep := &RegisterReport{Keys: len(keys)}
	var origin time.Time
	for _, o := range ops {
		if origin.IsZero() || o.Start.Before(origin) {
			origin = o.Start
		}
	}
	const never = int64(1) << 62
	clients := map[string]int{}
	for _, k := range keys {
		kops := byKey[k]
		slices.SortFunc(kops, func(a, b RegisterOp) int { return a.Start.Compare(b.Start) })
		hist := make([]porcupine.Operation, 0, len(kops))
		for _, o := range kops {
			id, ok := clients[o.Client]
			if !ok {
				id = len(clients)
				clients[o.Client] = id
			}
			ret := o.End.Sub(origin).Nanoseconds()
			if o.Outcome == AppendUnknown {
				ret = never
			}
			var out any = ""
			if !o.Put {
				out = o.Value
			}
			hist = append(hist, porcupine.Operation{ClientId: id, Input: registerInput{put: o.Put, value: o.Value},
				Call: o.Start.Sub(origin).Nanoseconds(), Output: out, Return: ret})
		}
		rep.Ops += len(hist)
		switch porcupine.CheckOperationsTimeout(registerModel, hist, perKey) {
		case porcupine.Illegal:
			rep.NonLinearizable = append(rep.NonLinearizable, k)
			if rep.Example == "" {
				rep.Example = describeRegister(k, kops, origin)
			}
		case porcupine.Unknown:
			rep.Timeouts = append(rep.Timeouts, k)
		}
	}
	return rep
}

// describeRegister names the first get that returned a value older than a
// put acknowledged before the get started (the common way a register
// history breaks), or else the key's first operations.
func describeRegister(key string, ops []RegisterOp, origin time.Time) string {
	rel := func(t time.Time) string { return "t+" + t.Sub(origin).Round(time.Millisecond).String() }
	putEnd := map[string]time.Time{}
	for _, o := range ops {
		if o.Put && o.Outcome == AppendOK {
			putEnd[o.Value] = o.End
		}
	}
	for _, g := range ops {
		if g.Put {
			continue
		}
		for _, p := range ops {
			if p.Put && p.Outcome == AppendOK && p.End.Before(g.Start) && p.Value != g.Value {
				if e, ok := putEnd[g.Value]; g.Value == "" || (ok && e.Before(p.Start)) {
					return fmt.Sprintf("key %s: get by %s [%s, %s] returned %q, but put(%q) by %s was acknowledged at %s, after the put of %q",
						key, g.Client, rel(g.Start), rel(g.End), g.Value, p.Value, p.Client, rel(p.End), g.Value)
				}
			}
		}
	}
	n := min(len(ops), 6)
	s := fmt.Sprintf("key %s (no simple stale read found; first %d ops):", key, n)
	for _, o := range ops[:n] {
		s += fmt.Sprintf(" [%s put=%v %q %s..%s %v]", o.Client, o.Put, o.Value, rel(o.Start), rel(o.End), o.Outcome)
	}
	return s
}

// String summarizes the report.
func (r *RegisterReport) String() string {
	s := fmt.Sprintf("register: %d keys, %d ops, %d non-linearizable keys, %d inconclusive", r.Keys, r.Ops, len(r.NonLinearizable), len(r.Timeouts))
	if r.Example != "" {
		s += "\n  " + r.Example
	}
	return s
}
