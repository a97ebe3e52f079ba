package dac

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func TestStagedDeadlinesFig10(t *testing.T) {
	const A, B, C, D, E, F, G, H = 0, 1, 2, 3, 4, 5, 6, 7
	tr := newTree([]int{Caller, A, A, C, B, B, A, A})
	end := t0.Add(time.Second)
	got := StagedDeadlines(tr, end, 5*ms, ms)
	want := map[int]time.Duration{ // offsets before end
		A: 6 * ms,         // only child of the Caller: rank 1
		G: 12 * ms,        // A's children by subtree size: G, H, C, B
		H: 17 * ms,        //
		C: 22 * ms,        //
		B: 27 * ms,        //
		D: (22 + 6) * ms,  // C's only child
		E: (27 + 6) * ms,  // B's children: E, F
		F: (27 + 11) * ms, //
	}
	for i, off := range want {
		if d := end.Sub(got[i]); d != off {
			t.Errorf("node %d: deadline end-%v, want end-%v", i, d, off)
		}
	}
	for i, d := range UniformDeadlines(tr, end) {
		if !d.Equal(end) {
			t.Errorf("uniform: node %d deadline %v, want %v", i, d, end)
		}
	}
}

// TestStagedDeadlinesLeaveParentsTime: over random trees, every node's
// deadline is at least a·rank + δ before its parent's.
func TestStagedDeadlinesLeaveParentsTime(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	a, delta := 5*ms, 2*ms
	for range 100 {
		n := 1 + r.IntN(200)
		for _, s := range []Scheme{Base, Flat, Binomial, LAT} {
			servers := uniformServers(n)
			for i := range servers {
				servers[i].Load = time.Duration(r.IntN(100)) * ms
			}
			tr, _ := Build(s, servers, r)
			d := StagedDeadlines(tr, t0, a, delta)
			for y := Caller; y < n; y++ {
				dy := t0
				if y != Caller {
					dy = d[y]
				}
				for rank, x := range tr.Kids(y) {
					if gap := dy.Sub(d[x]); gap != time.Duration(rank+1)*a+delta {
						t.Fatalf("%v: node %d rank %d under %d: gap %v", s, x, rank+1, y, gap)
					}
				}
			}
		}
	}
}

func kinds(as []Action) []ActionKind {
	var k []ActionKind
	for _, a := range as {
		k = append(k, a.Kind)
	}
	return k
}

func mustStep(t *testing.T, m *Machine, ev Event) []Action {
	t.Helper()
	if err := m.Step(ev); err != nil {
		t.Fatalf("Step(%+v): %v", ev, err)
	}
	return m.Ready()
}

func TestMachineLeaf(t *testing.T) {
	m := NewMachine(MachineConfig{Partition: 7, Local: true, Deadline: t0})
	if got := kinds(m.Ready()); !slices.Equal(got, []ActionKind{RunLocal, SetTimer}) {
		t.Fatalf("initial actions %v", got)
	}
	out := mustStep(t, m, Event{Kind: LocalDone, Data: "x"})
	if len(out) != 1 || out[0].Kind != Send || !slices.Equal(out[0].Partial.Partitions, []int{7}) || out[0].Partial.Data != "x" {
		t.Fatalf("after local: %+v", out)
	}
	if !m.Done() {
		t.Error("leaf not done after sending")
	}
	if out := mustStep(t, m, Event{Kind: Timeout}); len(out) != 0 {
		t.Errorf("timer after done produced %+v", out)
	}
}

func TestMachineReducesAsInputsArrive(t *testing.T) {
	m := NewMachine(MachineConfig{Partition: 0, Local: true, Children: []int{1, 2}})
	m.Ready()
	if out := mustStep(t, m, Event{Kind: ChildDone, From: 2, Partial: Partial{Partitions: []int{2}, Data: 2}}); len(out) != 0 {
		t.Fatalf("one input should wait, got %+v", out)
	}
	out := mustStep(t, m, Event{Kind: LocalDone, Data: 0})
	if len(out) != 1 || out[0].Kind != RunReduce {
		t.Fatalf("two inputs should reduce, got %+v", out)
	}
	r1 := out[0]
	// The last child arrives while the reduction runs: nothing to pair yet.
	if out := mustStep(t, m, Event{Kind: ChildDone, From: 1, Partial: Partial{Partitions: []int{1}, Data: 1}}); len(out) != 0 {
		t.Fatalf("got %+v", out)
	}
	out = mustStep(t, m, Event{Kind: ReduceDone, Seq: r1.Seq, Data: r1.A.(int) + r1.B.(int)})
	if len(out) != 1 || out[0].Kind != RunReduce {
		t.Fatalf("got %+v", out)
	}
	out = mustStep(t, m, Event{Kind: ReduceDone, Seq: out[0].Seq, Data: out[0].A.(int) + out[0].B.(int)})
	if len(out) != 1 || out[0].Kind != Send {
		t.Fatalf("got %+v", out)
	}
	p := out[0].Partial
	slices.Sort(p.Partitions)
	if !slices.Equal(p.Partitions, []int{0, 1, 2}) || p.Data != 3 {
		t.Errorf("sent %+v, want partitions 0,1,2 and sum 3", p)
	}
}

// TestMachineSkipsEmptyChildPartials: a child subtree that timed out with
// nothing sends an empty partial; it ends the wait but is never reduced.
func TestMachineSkipsEmptyChildPartials(t *testing.T) {
	m := NewMachine(MachineConfig{Partition: 0, Local: true, Children: []int{1}})
	m.Ready()
	mustStep(t, m, Event{Kind: LocalDone, Data: 7})
	out := mustStep(t, m, Event{Kind: ChildDone, From: 1})
	if len(out) != 1 || out[0].Kind != Send {
		t.Fatalf("got %+v, want the local result sent without a reduction", out)
	}
	if p := out[0].Partial; !slices.Equal(p.Partitions, []int{0}) || p.Data != 7 {
		t.Errorf("sent %+v, want partition 0 with 7", p)
	}
}

func TestMachineTimeout(t *testing.T) {
	m := NewMachine(MachineConfig{Partition: 0, Local: true, Children: []int{1, 2}, Deadline: t0, Grace: ms})
	m.Ready()
	mustStep(t, m, Event{Kind: LocalDone})
	out := mustStep(t, m, Event{Kind: ChildDone, From: 1, Partial: Partial{Partitions: []int{1}}})
	red := out[0]
	// The deadline fires during the reduction: the node gives it the grace
	// period, then sends without the silent child 2.
	out = mustStep(t, m, Event{Kind: Timeout})
	if len(out) != 1 || out[0].Kind != SetTimer || !out[0].At.Equal(t0.Add(ms)) || !m.Closed() || m.Done() {
		t.Fatalf("timeout during reduction: %+v closed=%v done=%v", out, m.Closed(), m.Done())
	}
	out = mustStep(t, m, Event{Kind: ReduceDone, Seq: red.Seq})
	if len(out) != 1 || out[0].Kind != Send || len(out[0].Partial.Partitions) != 2 {
		t.Fatalf("got %+v", out)
	}
	if out := mustStep(t, m, Event{Kind: ChildDone, From: 2}); len(out) != 0 {
		t.Errorf("late child produced %+v", out)
	}
}

// TestMachineGraceExpires: a reduction still running when the grace period
// ends is given up; the node sends the rest.
func TestMachineGraceExpires(t *testing.T) {
	m := NewMachine(MachineConfig{Partition: 0, Local: true, Children: []int{1, 2}, Deadline: t0, Grace: ms})
	m.Ready()
	mustStep(t, m, Event{Kind: LocalDone})
	red := mustStep(t, m, Event{Kind: ChildDone, From: 1, Partial: Partial{Partitions: []int{1}}})[0]
	mustStep(t, m, Event{Kind: ChildDone, From: 2, Partial: Partial{Partitions: []int{2}}})
	mustStep(t, m, Event{Kind: Timeout})
	out := mustStep(t, m, Event{Kind: Timeout})
	if len(out) != 1 || out[0].Kind != Send || !slices.Equal(out[0].Partial.Partitions, []int{2}) {
		t.Fatalf("after grace: %+v, want partition 2 sent", out)
	}
	if out := mustStep(t, m, Event{Kind: ReduceDone, Seq: red.Seq}); len(out) != 0 {
		t.Errorf("reduction after send produced %+v", out)
	}
}

// TestMachineGraceExpiresKeepsReductionInputs: when the grace period ends
// with the whole subtree inside a running reduction, the node sends the
// largest of its inputs rather than nothing.
func TestMachineGraceExpiresKeepsReductionInputs(t *testing.T) {
	m := NewMachine(MachineConfig{Partition: 0, Local: true, Children: []int{1, 2}, Deadline: t0, Grace: ms})
	m.Ready()
	mustStep(t, m, Event{Kind: LocalDone})
	mustStep(t, m, Event{Kind: ChildDone, From: 1, Partial: Partial{Partitions: []int{1, 3, 4}}})
	mustStep(t, m, Event{Kind: Timeout})
	out := mustStep(t, m, Event{Kind: Timeout})
	if len(out) != 1 || out[0].Kind != Send || !slices.Equal(out[0].Partial.Partitions, []int{1, 3, 4}) {
		t.Fatalf("after grace: %+v, want partitions 1, 3, 4 sent", out)
	}
}

func TestMachineFailures(t *testing.T) {
	boom := errors.New("boom")
	m := NewMachine(MachineConfig{Partition: 4, Local: true, Children: []int{1}})
	m.Ready()
	mustStep(t, m, Event{Kind: LocalDone, Err: boom})
	out := mustStep(t, m, Event{Kind: ChildDone, From: 1, Partial: Partial{Partitions: []int{1}}})
	if len(out) != 1 || out[0].Kind != Send || !slices.Equal(out[0].Partial.Partitions, []int{1}) {
		t.Fatalf("failed local should drop only partition 4, got %+v", out)
	}

	m = NewMachine(MachineConfig{Partition: 0, Local: true, Children: []int{1}, Deadline: t0})
	m.Ready()
	for _, ev := range []Event{
		{Kind: ChildDone, From: 9},
		{Kind: ReduceDone, Seq: 42},
		{Kind: EventKind(0)},
	} {
		if err := m.Step(ev); !errors.Is(err, ErrUnexpected) {
			t.Errorf("Step(%+v) = %v, want ErrUnexpected", ev, err)
		}
	}
	mustStep(t, m, Event{Kind: ChildDone, From: 1})
	if err := m.Step(Event{Kind: ChildDone, From: 1}); !errors.Is(err, ErrUnexpected) {
		t.Errorf("duplicate child result: %v, want ErrUnexpected", err)
	}
	out = mustStep(t, m, Event{Kind: LocalDone})
	mustStep(t, m, Event{Kind: ReduceDone, Seq: out[0].Seq})
	if !m.Done() {
		t.Fatal("not done with local and child results in")
	}
	m = NewMachine(MachineConfig{Partition: 0, Local: false, Children: []int{1}})
	if err := m.Step(Event{Kind: LocalDone}); !errors.Is(err, ErrUnexpected) {
		t.Errorf("local result at the Caller: %v, want ErrUnexpected", err)
	}

	// With nothing in hand at the deadline, the node sends an empty partial
	// so its parent stops waiting.
	m = NewMachine(MachineConfig{Partition: 0, Local: true, Deadline: t0})
	m.Ready()
	out = mustStep(t, m, Event{Kind: Timeout})
	if len(out) != 1 || out[0].Kind != Send || len(out[0].Partial.Partitions) != 0 {
		t.Fatalf("got %+v", out)
	}
}

func TestRequestAndFinish(t *testing.T) {
	req := Request{Service: "s", Partitions: []int{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, Quality: 0.9, Deadline: time.Second}
	if err := req.Validate(); err != nil {
		t.Fatal(err)
	}
	if req.Needed() != 9 {
		t.Fatalf("Needed = %d, want 9", req.Needed())
	}
	for _, tc := range []struct {
		parts  []int
		status Status
		err    error
	}{
		{req.Partitions, StatusFull, nil},
		{req.Partitions[1:], StatusPartial, nil},
		{req.Partitions[2:], StatusFailed, ErrBelowQuality},
	} {
		res, err := Finish(req, Partial{Partitions: tc.parts, Data: "d"})
		if !errors.Is(err, tc.err) || res.Status != tc.status || len(res.Contributing) != len(tc.parts) {
			t.Errorf("%d parts: %v %v, want %v %v", len(tc.parts), res.Status, err, tc.status, tc.err)
		}
		if want := float64(len(tc.parts)) / 10; res.Coverage != want {
			t.Errorf("coverage %v, want %v", res.Coverage, want)
		}
	}
	for name, bad := range map[string]Request{
		"Service":    {Partitions: []int{1}, Quality: 1, Deadline: 1},
		"Partitions": {Service: "s", Quality: 1, Deadline: 1},
		"Quality":    {Service: "s", Partitions: []int{1}, Quality: 1.5, Deadline: 1},
		"Deadline":   {Service: "s", Partitions: []int{1}, Quality: 1},
		"Scheme":     {Service: "s", Partitions: []int{1}, Quality: 1, Deadline: 1, Scheme: 7},
		"twice":      {Service: "s", Partitions: []int{1, 1}, Quality: 1, Deadline: 1},
	} {
		err := bad.Validate()
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Validate(%s) = %v, want an error naming it", name, err)
		}
	}
	for _, s := range []Scheme{Base, Flat, Binomial, LAT} {
		if got, err := ParseScheme(s.String()); err != nil || got != s {
			t.Errorf("ParseScheme(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseScheme("star"); !errors.Is(err, ErrScheme) {
		t.Errorf("ParseScheme(star) = %v", err)
	}
}

// TestMachineReportsProgress: with Progress, the top of a streaming
// aggregation reports each larger reduced result once, never a smaller or
// equal one, and never in place of Send; without it, it reports nothing.
func TestMachineReportsProgress(t *testing.T) {
	m := NewMachine(MachineConfig{Partition: 0, Local: true, Children: []int{1, 2}, Progress: true})
	m.Ready()
	progress := func(out []Action) []int {
		t.Helper()
		var got []int
		for _, a := range out {
			if a.Kind == Progress {
				if got != nil {
					t.Fatalf("two Progress actions in one step: %+v", out)
				}
				got = slices.Sorted(slices.Values(a.Partial.Partitions))
			}
		}
		return got
	}
	if got := progress(mustStep(t, m, Event{Kind: LocalDone, Data: 0})); !slices.Equal(got, []int{0}) {
		t.Fatalf("after local: progress %v, want [0]", got)
	}
	out := mustStep(t, m, Event{Kind: ChildDone, From: 2, Partial: Partial{Partitions: []int{2, 5}, Data: 7}})
	if got := progress(out); !slices.Equal(got, []int{2, 5}) {
		t.Fatalf("after child 2: progress %v, want [2 5] (a reduction input)", got)
	}
	red := out[0]
	if red.Kind != RunReduce {
		t.Fatalf("after child 2: %+v, want a reduction first", out)
	}
	// The reduction fails: its inputs drop out, and nothing smaller is
	// reported.
	if got := progress(mustStep(t, m, Event{Kind: ReduceDone, Seq: red.Seq, Err: errors.New("boom")})); got != nil {
		t.Fatalf("after failed reduction: progress %v, want none", got)
	}
	out = mustStep(t, m, Event{Kind: ChildDone, From: 1, Partial: Partial{Partitions: []int{1, 3, 4}, Data: 8}})
	if got := progress(out); got != nil || len(out) != 1 || out[0].Kind != Send {
		t.Fatalf("last input: %+v, want Send alone (progress %v)", out, got)
	}

	plain := NewMachine(MachineConfig{Partition: 0, Local: true, Children: []int{1}})
	plain.Ready()
	if got := progress(mustStep(t, plain, Event{Kind: LocalDone, Data: 0})); got != nil {
		t.Fatalf("without Progress: reported %v", got)
	}
}

// TestMachineProgressGrowsToSend: over random arrival orders the reported
// sizes strictly grow and end below or at what is sent.
func TestMachineProgressGrowsToSend(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		n := 1 + r.IntN(8)
		kids := make([]int, n)
		for i := range kids {
			kids[i] = i + 1
		}
		m := NewMachine(MachineConfig{Partition: 0, Local: true, Children: kids, Progress: true})
		m.Ready()
		pending := []Event{{Kind: LocalDone, Data: 1}}
		for _, k := range kids {
			pending = append(pending, Event{Kind: ChildDone, From: k, Partial: Partial{Partitions: []int{k}, Data: 1}})
		}
		last, sent := 0, -1
		for len(pending) > 0 && sent < 0 {
			i := r.IntN(len(pending))
			ev := pending[i]
			pending = slices.Delete(pending, i, i+1)
			for _, a := range mustStep(t, m, ev) {
				switch a.Kind {
				case Progress:
					if len(a.Partial.Partitions) <= last {
						t.Fatalf("progress %d after %d", len(a.Partial.Partitions), last)
					}
					last = len(a.Partial.Partitions)
				case RunReduce:
					pending = append(pending, Event{Kind: ReduceDone, Seq: a.Seq, Data: a.A.(int) + a.B.(int)})
				case Send:
					sent = len(a.Partial.Partitions)
				}
			}
		}
		if sent != n+1 || last > sent {
			t.Fatalf("sent %d partitions (want %d), last progress %d", sent, n+1, last)
		}
	}
}
