package replica

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Large writes must not make elections fail. Every replica holds the same
// uncommitted tail when the primary dies, and a message with entries takes
// three election timeouts to arrive (8 MiB bodies on a busy link). If a
// vote needed the voter's log tail, every grant would arrive after the
// candidate gave up and started the next election, forever (the storm the
// burst bench met). Votes carry no entries, so one election suffices and
// the tail commits.
func TestLargeTailElectsOnce(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	var ws []uint64
	for range 4 {
		ws = append(ws, c.write("a"))
	}
	c.deliverTo(MsgAppend, "b")
	c.deliverTo(MsgAppend, "c")
	c.net = nil // the acks are lost: the tail is uncommitted everywhere
	before := c.nodes["b"].r.Status().Epoch
	c.crash("a")
	c.bulk = 3 * c.cfg.ElectionTimeout
	c.settle(3 * time.Second)
	if p := c.primary(); p == "" {
		t.Fatalf("no primary; epoch %d -> %d", before, c.nodes["b"].r.Status().Epoch)
	}
	for _, id := range []ID{"b", "c"} {
		if e := c.nodes[id].r.Status().Epoch; e != before+1 {
			t.Fatalf("%s at epoch %d, want %d: %d elections", id, e, before+1, e-before)
		}
		for _, w := range ws {
			if !c.has(id, w) {
				t.Fatalf("%s lacks write %d of the tail", id, w)
			}
		}
	}
}

// writeSized submits a write with a body of n bytes at node id.
func (c *cluster) writeSized(id ID, n int) uint64 {
	c.nextID++
	body := fmt.Sprintf("w%d.", c.nextID)
	body += strings.Repeat("x", max(0, n-len(body)))
	c.prop[c.nextID] = body
	nd := c.nodes[id]
	c.origin[c.nextID] = [2]int{slices.Index(c.order, id), nd.inc}
	nd.r.Propose(c.local(id, c.now), Write{ReqID: c.nextID, Method: "put", Body: []byte(body)})
	c.process(nd)
	return c.nextID
}

// queuedTo sums the entry bytes of the appends queued to to, and counts
// the queued appends without entries (heartbeats).
func (c *cluster) queuedTo(to ID) (bytes, beats int) {
	for _, m := range c.net {
		if m.Type != MsgAppend || m.To != to {
			continue
		}
		if len(m.Entries) == 0 {
			beats++
		}
		for _, e := range m.Entries {
			bytes += e.size()
		}
	}
	return
}

// A follower that does not acknowledge is sent at most MaxInflightBytes
// (plus one message) of entries, not the whole backlog; it keeps getting
// heartbeats meanwhile, and once its acks arrive it is caught up in
// windows, with nothing sent twice.
func TestCatchUpIsPaced(t *testing.T) {
	const body = 1 << 10
	c := newCluster(t, 1, Level2, []int{3, 2, 1}, func(cfg *Config) {
		cfg.MaxBatchBytes = 2 * body
		cfg.MaxInflightBytes = 4 * body
		cfg.MinLive = 2
	})
	c.settle(time.Second)
	if c.primary() != "a" {
		t.Fatalf("primary %q, want a", c.primary())
	}
	var ws []uint64
	for range 20 {
		ws = append(ws, c.writeSized("a", body))
		c.deliverTo(MsgAppend, "c")
		c.deliverTo(MsgAppendResp, "a")
	}
	bytes, _ := c.queuedTo("b")
	if limit := c.cfg.MaxInflightBytes + c.cfg.MaxBatchBytes; bytes > limit || bytes == 0 {
		t.Fatalf("%d bytes of entries queued to b, want 1..%d", bytes, limit)
	}
	c.tick(c.cfg.Heartbeat)
	if _, beats := c.queuedTo("b"); beats == 0 {
		t.Fatal("no heartbeat to b while its window is full")
	}
	c.settle(2 * time.Second)
	for _, w := range ws {
		if !c.has("b", w) {
			t.Fatalf("b lacks write %d", w)
		}
	}
	if sent, last := c.entriesTo["b"], c.nodes["a"].r.last(); sent > int(last) {
		t.Fatalf("%d entries sent to b for a log of %d: some twice", sent, last)
	}
}
