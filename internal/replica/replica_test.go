package replica

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{ID: "a", Level: Level2, Replicas: []Peer{{ID: "a"}, {ID: "b"}}}
	tests := []struct {
		name   string
		mutate func(*Config)
		field  string
	}{
		{"valid", func(*Config) {}, ""},
		{"no id", func(c *Config) { c.ID = "" }, "Config.ID"},
		{"level", func(c *Config) { c.Level = 4 }, "Config.Level"},
		{"self missing", func(c *Config) { c.ID = "z" }, "Config.Replicas"},
		{"duplicate", func(c *Config) { c.Replicas = append(c.Replicas, Peer{ID: "b"}) }, "Config.Replicas"},
		{"minlive", func(c *Config) { c.MinLive = 3 }, "Config.MinLive"},
		{"negative", func(c *Config) { c.AckTimeout = -1 }, "Config.AckTimeout"},
		{"batch", func(c *Config) { c.MaxBatch = -1 }, "Config.MaxBatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			c.Replicas = slices.Clone(ok.Replicas)
			tt.mutate(&c)
			err := c.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

func TestBootstrapElectsHighestPriority(t *testing.T) {
	c := newCluster(t, 1, Level2, []int{1, 3, 2}, nil)
	c.settle(time.Second)
	if p := c.primary(); p != "b" {
		t.Fatalf("primary = %q, want b (highest priority)", p)
	}
	for _, id := range c.order {
		s := c.nodes[id].r.Status()
		if s.Epoch != 1 || s.Primary != "b" || s.Phase != PhaseServing {
			t.Fatalf("%s status %+v, want epoch 1, primary b, serving", id, s)
		}
	}
}

func settled(t *testing.T, level Level, prios []int) *cluster {
	t.Helper()
	c := newCluster(t, 1, level, prios, nil)
	c.settle(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary = %q, want a", c.primary())
	}
	return c
}

// deliverTo delivers, in order, the queued messages of type typ to to.
func (c *cluster) deliverTo(typ MsgType, to ID) {
	for i := 0; i < len(c.net); {
		if c.net[i].Type == typ && c.net[i].To == to {
			c.deliver(i)
			continue
		}
		i++
	}
}

func TestPrimaryExecutesAfterEveryLiveReplicaAcks(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	a := c.nodes["a"]
	before := len(a.svc.ops)
	w1, w2 := c.write("a"), c.write("a")
	c.deliverTo(MsgAppend, "b")
	c.deliverTo(MsgAppend, "c")
	if len(a.svc.ops) != before {
		t.Fatal("primary executed before any acknowledgement arrived")
	}
	c.deliverTo(MsgAppendResp, "a") // b's and c's acks are queued in that order
	if _, ok := c.acked[w2]; !ok {
		t.Fatalf("write not acknowledged after every replica acked; acked=%v", c.acked)
	}
	if c.acked[w1] >= c.acked[w2] {
		t.Fatalf("LSNs %d, %d not in proposal order", c.acked[w1], c.acked[w2])
	}
	c.flush()
	for _, id := range c.order {
		if got := c.nodes[id].svc.ops; !slices.Equal(got, a.svc.ops) {
			t.Fatalf("%s executed %v, primary %v", id, got, a.svc.ops)
		}
	}
}

func TestPrimaryWaitsForSlowReplica(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	w := c.write("a")
	c.deliverTo(MsgAppend, "b")
	c.deliverTo(MsgAppendResp, "a")
	if _, ok := c.acked[w]; ok {
		t.Fatal("acknowledged before c (live) acknowledged receipt")
	}
}

func TestLowerEpochRefused(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	b := c.nodes["b"]
	last := b.r.Status().Last
	b.r.Step(c.now, Message{Type: MsgAppend, From: "c", To: "b", Epoch: 0, PrevLSN: last,
		Entries: []Entry{{Epoch: 0, LSN: last + 1, Method: "put", Body: []byte("stale")}}, Commit: last + 1})
	rd := b.r.Ready()
	if len(rd.Entries) != 0 || len(rd.Apply) != 0 {
		t.Fatalf("lower-epoch append accepted: %+v", rd)
	}
	if len(rd.Messages) != 1 || !rd.Messages[0].Reject || rd.Messages[0].Epoch != 1 {
		t.Fatalf("want one reject carrying epoch 1, got %+v", rd.Messages)
	}
	b.r.Advance(rd)
}

func TestFailoverByPriorityKeepsAckedWrites(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	for range 5 {
		c.write("a")
	}
	c.settle(100 * time.Millisecond)
	if len(c.acked) != 5 {
		t.Fatalf("acked %d of 5", len(c.acked))
	}
	c.crash("a")
	c.settle(500 * time.Millisecond)
	s := c.nodes["b"].r.Status()
	if s.Role != Primary || s.Epoch != 2 {
		t.Fatalf("b status %+v, want primary in epoch 2", s)
	}
	w := c.write("b")
	c.settle(100 * time.Millisecond)
	if _, ok := c.acked[w]; !ok {
		t.Fatal("new primary does not commit")
	}
	for req := range c.acked {
		for _, id := range []ID{"b", "c"} {
			if !c.has(id, req) {
				t.Fatalf("acknowledged write %d lost at %s", req, id)
			}
		}
	}
}

// The old primary got a write to c only and crashed: the write was never
// acknowledged, and c may hold it. c refuses b its vote (b's log is less
// recent), so c leads first and b and c do not diverge; b, preferred,
// takes over by leadership transfer once it has caught up.
func TestMostRecentLogLeadsFirst(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	w := c.write("a")
	c.deliverTo(MsgAppend, "c")
	c.net = nil // the append to b and c's ack are lost
	c.crash("a")
	c.settle(500 * time.Millisecond)
	if !slices.Contains(slices.Collect(maps.Values(c.primaries)), "c") {
		t.Fatalf("c never led: primaries %v", c.primaries)
	}
	if c.primary() != "b" {
		t.Fatalf("primary %q, want b", c.primary())
	}
	for _, id := range []ID{"b", "c"} {
		if !c.has(id, w) {
			t.Fatalf("%s lacks the write c held", id)
		}
	}
	if !slices.Equal(c.nodes["b"].svc.ops, c.nodes["c"].svc.ops) {
		t.Fatal("b and c diverged")
	}
}

func TestAckTimeoutExcludesThenRejoins(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	cut := func() { // lose everything to and from c
		kept := c.net[:0]
		for _, m := range c.net {
			if m.To != "c" && m.From != "c" {
				kept = append(kept, m)
			}
		}
		c.net = kept
	}
	w := c.write("a")
	for range 30 { // 300ms > AckTimeout
		c.tick(10 * time.Millisecond)
		cut()
		c.flush()
	}
	if _, ok := c.acked[w]; !ok {
		t.Fatal("write blocked by an unresponsive replica past the ack timeout")
	}
	if live := c.nodes["a"].r.Status().Live; slices.Contains(live, "c") {
		t.Fatalf("c still in live set %v", live)
	}
	c.settle(300 * time.Millisecond)
	if live := c.nodes["a"].r.Status().Live; !slices.Contains(live, "c") {
		t.Fatalf("c did not rejoin after catching up: live %v", live)
	}
	if !c.has("c", w) || c.nodes["c"].r.Status().Role != Secondary {
		t.Fatal("c did not catch up and resume as a secondary")
	}
}

// Phase 1: the executed marker on disk lags the service. CHECK must keep
// completed writes from running twice and reissue the rest in order.
func TestRecoveryPhase1Check(t *testing.T) {
	var es []Entry
	for l := LSN(1); l <= 5; l++ {
		es = append(es, Entry{Epoch: 1, LSN: l, Method: "put"})
	}
	cfg := Config{ID: "a", Level: Level2, Replicas: []Peer{{ID: "a", Priority: 2}, {ID: "b", Priority: 1}}}
	r, err := New(cfg, Restore{HardState: HardState{Epoch: 1, Commit: 5}, Entries: es, Applied: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Status(); s.Phase != PhaseCheck || s.Role != Recovering {
		t.Fatalf("status %+v, want phase 1", s)
	}
	rd := r.Ready()
	var checked []LSN
	for _, e := range rd.Check {
		checked = append(checked, e.LSN)
		r.Checked(e.LSN, e.LSN <= 3) // the service completed up to 3
	}
	if !slices.Equal(checked, []LSN{2, 3, 4, 5}) {
		t.Fatalf("CHECK asked for %v, want 2..5", checked)
	}
	if len(rd.Apply) != 0 {
		t.Fatal("executed before CHECK answered")
	}
	r.Advance(rd)
	rd = r.Ready()
	var reissued []LSN
	for _, e := range rd.Apply {
		reissued = append(reissued, e.LSN)
	}
	if !slices.Equal(reissued, []LSN{4, 5}) {
		t.Fatalf("reissued %v, want [4 5]", reissued)
	}
	r.Advance(rd)
	if s := r.Status(); s.Phase != PhaseCatchUp || s.Applied != 5 {
		t.Fatalf("status %+v, want phase 2 with applied 5", s)
	}
}

// Phase 2 and 3: a recovering replica with the highest priority catches up
// from the current primary, then takes the role back in a higher epoch.
func TestRecoveringHigherPriorityTakesPrimaryBack(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.write("a")
	c.settle(100 * time.Millisecond)
	c.crash("a")
	c.settle(500 * time.Millisecond)
	for range 5 {
		c.write("b")
	}
	c.settle(100 * time.Millisecond)
	c.start(c.nodes["a"])
	if s := c.nodes["a"].r.Status(); s.Role != Recovering {
		t.Fatalf("restarted a is %v, want recovering", s.Role)
	}
	sawCatchUp := false
	for range 100 {
		c.tick(10 * time.Millisecond)
		c.flush()
		s := c.nodes["a"].r.Status()
		if s.Role == Recovering && s.Primary == "b" {
			sawCatchUp = true
		}
		if s.Role == Primary {
			break
		}
	}
	s := c.nodes["a"].r.Status()
	if !sawCatchUp || s.Role != Primary || s.Epoch != 3 {
		t.Fatalf("a: caught up from b %v, final %+v; want primary in epoch 3", sawCatchUp, s)
	}
	c.settle(100 * time.Millisecond)
	c.checkConverged()
	if len(c.acked) != 6 {
		t.Fatalf("acked %d of 6", len(c.acked))
	}
}

func TestWriteWithoutPrimaryFailsRetryably(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.crash("a")
	c.crash("b") // c alone cannot reach MinLive=2: no primary
	w := c.write("c")
	c.settle(200 * time.Millisecond)
	if c.replied[w] {
		t.Fatal("answered before WriteWait elapsed")
	}
	c.settle(200 * time.Millisecond)
	if err := c.failed[w]; !errors.Is(err, ErrNoPrimary) || !Retryable(err) {
		t.Fatalf("got %v, want retryable ErrNoPrimary", err)
	}
}

func TestWriteAtSecondaryRedirects(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	w := c.write("b")
	var np *NotPrimaryError
	if !errors.As(c.failed[w], &np) || np.Primary != "a" {
		t.Fatalf("got %v, want a redirect to a", c.failed[w])
	}
}

// With fewer than MinLive survivors the operator promotes the newest one;
// the others recover from it.
func TestPromoteAfterCatastrophe(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.write("a")
	c.settle(100 * time.Millisecond)
	c.crash("a")
	c.crash("b")
	c.settle(500 * time.Millisecond)
	if c.primary() != "" {
		t.Fatal("a lone replica elected itself below MinLive")
	}
	c.nodes["c"].r.Promote(c.now, true)
	c.process(c.nodes["c"])
	w := c.write("c")
	c.start(c.nodes["b"])
	c.settle(300 * time.Millisecond)
	if _, ok := c.acked[w]; !ok {
		t.Fatal("promoted primary does not commit")
	}
	c.start(c.nodes["a"])
	c.settle(time.Second)
	c.checkConverged()
}

func TestLogTruncation(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	for range 20 {
		c.write("a")
	}
	c.settle(200 * time.Millisecond)
	a := c.nodes["a"]
	if a.r.first <= 10 || len(a.disk.log) >= 10 {
		t.Fatalf("log not truncated: first %d, %d entries on disk", a.r.first, len(a.disk.log))
	}
	c.crash("c")
	c.settle(300 * time.Millisecond)
	keep := a.r.first
	for range 20 {
		c.write("a")
	}
	c.settle(300 * time.Millisecond)
	if a.r.first != keep {
		t.Fatalf("truncated to %d past what the down replica c holds (%d)", a.r.first-1, keep-1)
	}
	c.start(c.nodes["c"])
	c.settle(500 * time.Millisecond)
	c.checkConverged()
	if a.r.first <= keep {
		t.Fatal("log not truncated after c caught up")
	}
}

func TestLevel3VersionAgoAndSession(t *testing.T) {
	c := settled(t, Level3, []int{3, 2, 1}) // Staleness 100ms
	w1 := c.write("a")
	c.settle(50 * time.Millisecond)
	v1 := c.acked[w1]
	c.settle(100 * time.Millisecond)
	w2 := c.write("a")
	c.settle(20 * time.Millisecond)
	v2 := c.acked[w2]
	s := c.nodes["a"].r.Status()
	if s.VersionAgo < v1 || s.VersionAgo >= v2 {
		t.Fatalf("VersionAgo %d, want in [%d, %d)", s.VersionAgo, v1, v2)
	}
	var sess Session
	sess.Observe("p", v2)
	if MayServe(v1, s.VersionAgo, sess.Min("p")) {
		t.Fatal("a replica behind the session's own write may serve it")
	}
	if !MayServe(v2, s.VersionAgo, sess.Min("p")) || MayServe(s.VersionAgo-1, s.VersionAgo, 0) {
		t.Fatal("MayServe disagrees with the staleness bound")
	}
}

func TestLevel1ConvergesWithLoss(t *testing.T) {
	c := newCluster(t, 3, Level1, []int{1, 1, 1}, nil)
	c.settle(100 * time.Millisecond)
	c.drop = 0.5
	for i := range 30 {
		c.write(c.order[i%3])
		c.tick(10 * time.Millisecond)
		c.flush()
	}
	if len(c.acked) != 30 {
		t.Fatalf("level 1 acked %d of 30 local writes", len(c.acked))
	}
	c.drop = 0
	c.settle(500 * time.Millisecond)
	c.checkConverged()
	if got := len(c.nodes["a"].svc.ops); got != 30 {
		t.Fatalf("a executed %d writes, want 30", got)
	}
}

// TestLevel1LogTruncatedOnceEveryoneHoldsIt: a level-1 log keeps only what
// some peer may still need, and a replica restarted after truncation knows
// from the stored base which writes it holds, so none runs twice (the
// harness's service fails on a repeated execution) and none is missing.
func TestLevel1LogTruncatedOnceEveryoneHoldsIt(t *testing.T) {
	c := newCluster(t, 3, Level1, []int{1, 1, 1}, nil)
	c.settle(100 * time.Millisecond)
	for i := range 30 {
		c.write(c.order[i%3])
		c.tick(10 * time.Millisecond)
		c.flush()
	}
	c.settle(500 * time.Millisecond)
	c.checkConverged()
	for _, id := range c.order {
		if n := c.nodes[id]; len(n.r.log) > 0 || len(n.disk.log) > 0 {
			t.Fatalf("%s keeps %d entries in memory, %d on disk after every replica has all 30", id, len(n.r.log), len(n.disk.log))
		}
	}
	c.crash("b")
	for i := range 10 {
		c.write(c.order[2*(i%2)]) // a and c
		c.tick(10 * time.Millisecond)
		c.flush()
	}
	c.settle(300 * time.Millisecond)
	if got := len(c.nodes["a"].r.log); got < 10 {
		t.Fatalf("a truncated to %d entries while b, which lacks 10, is down", got)
	}
	c.start(c.nodes["b"])
	c.settle(time.Second)
	c.checkConverged()
	if got := len(c.nodes["b"].svc.ops); got != 40 {
		t.Fatalf("b executed %d writes after its restart, want 40", got)
	}
}

// A retransmitted or duplicated append must not execute a write twice (the
// harness's service fails the test on any LSN executed twice).
func TestDuplicateAppendExecutesOnce(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	c.write("a")
	var dup []Message
	for _, m := range c.net {
		if m.Type == MsgAppend {
			dup = append(dup, m)
		}
	}
	c.flush()
	c.settle(50 * time.Millisecond)
	before := slices.Clone(c.nodes["b"].svc.ops)
	c.net = append(c.net, dup...)
	c.flush()
	if got := c.nodes["b"].svc.ops; !slices.Equal(got, before) || len(got) == 0 {
		t.Fatalf("after duplicate delivery b executed %v, before %v", got, before)
	}
}

// TestAppendBatchesBoundedByBytes: a replica catching up gets the log in
// messages of at most MaxBatchBytes (large writes would otherwise exceed
// the transport's message limit on every retry and never arrive).
func TestAppendBatchesBoundedByBytes(t *testing.T) {
	const limit = 40 // "put" + "wNN": about six entries, under MaxBatch 8
	c := newCluster(t, 1, Level2, []int{3, 2, 1}, func(cfg *Config) { cfg.MaxBatchBytes = limit })
	c.settle(time.Second)
	c.crash("c")
	for range 30 {
		c.write("a")
		c.settle(50 * time.Millisecond)
	}
	c.start(c.nodes["c"])
	batches := 0
	for range 100 {
		c.tick(10 * time.Millisecond)
		for len(c.net) > 0 {
			if m := c.net[0]; m.Type == MsgAppend && len(m.Entries) > 1 {
				size := 0
				for _, e := range m.Entries {
					size += len(e.Method) + len(e.Body)
				}
				if size > limit {
					t.Fatalf("append of %d entries carries %d bytes, limit %d", len(m.Entries), size, limit)
				}
				batches++
			}
			c.deliver(0)
		}
	}
	if batches == 0 {
		t.Fatal("no multi-entry append seen: the test did not exercise catch-up")
	}
	if got, want := c.nodes["c"].svc.ops, c.nodes["a"].svc.ops; !slices.Equal(got, want) {
		t.Fatalf("c executed %d ops, primary %d: catch-up did not complete", len(got), len(want))
	}
}
