package replica

import (
	"testing"
	"time"
)

// countTo counts queued messages of type typ to to, and how many of them
// carry entries or are rejects.
func (c *cluster) countTo(typ MsgType, to ID) (n, withEntries, rejects int) {
	for _, m := range c.net {
		if m.Type == typ && m.To == to {
			n++
			if len(m.Entries) > 0 {
				withEntries++
			}
			if m.Reject {
				rejects++
			}
		}
	}
	return
}

// deliverEmpty delivers, in order, the queued appends to to that carry no
// entries: heartbeats overtaking the entries still in flight.
func (c *cluster) deliverEmpty(to ID) {
	for i := 0; i < len(c.net); {
		if m := c.net[i]; m.Type == MsgAppend && m.To == to && len(m.Entries) == 0 {
			c.deliver(i)
			continue
		}
		i++
	}
}

// While a large append to b is still in flight, heartbeats overtake it (the
// shell sends them in their own lane): b takes them as heartbeats (no
// reject, so no resend of the entries) and the primary does not resend the
// entries either before retransmitAfter; once the append arrives, all
// converge with the entries sent once.
func TestHeartbeatAheadOfTheLogIsNoGap(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	a, b := c.nodes["a"].r, c.nodes["b"].r
	c.write("a")
	c.deliverTo(MsgAppend, "c")
	c.deliverTo(MsgAppendResp, "a")
	if _, withEntries, _ := c.countTo(MsgAppend, "b"); withEntries != 1 {
		t.Fatalf("%d appends with entries queued to b, want 1", withEntries)
	}
	wait := a.retransmitAfter()
	if wait <= c.cfg.Heartbeat {
		t.Fatalf("retransmitAfter %v is not longer than a heartbeat %v", wait, c.cfg.Heartbeat)
	}
	for elapsed := time.Duration(0); elapsed+c.cfg.Heartbeat < wait; elapsed += c.cfg.Heartbeat {
		c.tick(c.cfg.Heartbeat)
		c.deliverEmpty("b")
		if _, _, rejects := c.countTo(MsgAppendResp, "a"); rejects > 0 {
			t.Fatal("b rejected a heartbeat that arrived ahead of its log")
		}
		c.deliverTo(MsgAppendResp, "a")
		if _, withEntries, _ := c.countTo(MsgAppend, "b"); withEntries != 1 {
			t.Fatalf("after %v: %d appends with entries queued to b: the entries were resent", elapsed+c.cfg.Heartbeat, withEntries)
		}
		if !b.primaryLive(c.now) || b.Status().Primary != "a" {
			t.Fatalf("b no longer follows a live primary after %v", elapsed)
		}
	}
	c.flush()
	c.settle(time.Second)
	c.checkConverged()
	// A gap is still a gap: an append with entries ahead of the log is refused.
	last := b.last()
	b.Step(c.now, Message{Type: MsgAppend, From: "a", To: "b", Epoch: b.epoch, PrevLSN: last + 5, PrevEpoch: b.epoch,
		Entries: []Entry{{Epoch: b.epoch, LSN: last + 6, Method: "put"}}})
	rd := b.Ready()
	if len(rd.Messages) != 1 || !rd.Messages[0].Reject {
		t.Fatalf("append with entries past the log: %+v, want a reject", rd.Messages)
	}
}

// Entries lost in flight are still resent, after retransmitAfter.
func TestLostAppendIsResentAfterRetransmitAfter(t *testing.T) {
	c := settled(t, Level2, []int{3, 2, 1})
	w := c.write("a")
	for i := 0; i < len(c.net); { // the append to b is lost
		if m := c.net[i]; m.Type == MsgAppend && m.To == "b" {
			c.net = append(c.net[:i], c.net[i+1:]...)
			continue
		}
		i++
	}
	c.settle(time.Second)
	if _, ok := c.acked[w]; !ok {
		t.Fatal("the write was never acknowledged: the lost append was not resent")
	}
	c.checkConverged()
}
