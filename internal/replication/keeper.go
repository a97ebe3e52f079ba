package replication

import (
	"context"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// beatKeeper keeps a primary's heartbeats going while its partition loop
// is busy: persisting a multi-MiB batch with fsync and running its
// handlers can take longer than AckTimeout, and the loop ticks the
// replica only between batches, so the followers would hear nothing and
// elect. While the loop has been busy for a heartbeat interval, the keeper
// sends again the last heartbeat (an append without entries) the replica
// produced for each peer: a message the core already sent, harmless to
// repeat, that tells the follower its primary is alive. It never steps the
// replica, which the loop owns.
type beatKeeper struct {
	mu        sync.Mutex
	beats     map[replica.ID]replica.Message
	busySince time.Time // zero while the loop is idle
}

// note records m if it is a heartbeat of a primary.
func (k *beatKeeper) note(m replica.Message) {
	if m.Type != replica.MsgAppend || len(m.Entries) > 0 {
		return
	}
	k.mu.Lock()
	if k.beats == nil {
		k.beats = map[replica.ID]replica.Message{}
	}
	k.beats[m.To] = m
	k.mu.Unlock()
}

// busy marks the loop busy from now (or idle, with the zero time).
func (k *beatKeeper) busy(since time.Time) {
	k.mu.Lock()
	k.busySince = since
	k.mu.Unlock()
}

// keepBeats runs until ctx ends, resending p's last heartbeats every
// interval while p's loop has been busy that long and p leads.
func (p *part) keepBeats(ctx context.Context) {
	interval := p.heartbeat()
	clk := p.rt.clock
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.done:
			return
		case <-t.Chan():
		}
		for _, m := range p.keeper.due(clk.Now(), interval, p.status.Load()) {
			p.rt.send(p.key, m)
		}
	}
}

// heartbeat is the partition's heartbeat interval.
func (p *part) heartbeat() time.Duration {
	if p.cfg.Heartbeat <= 0 {
		return 50 * time.Millisecond // replica's default
	}
	return p.cfg.Heartbeat
}

// keepBeatsFor bounds how long the keeper speaks for a busy loop. A loop
// busy longer is not persisting a large batch but stuck (a handler that
// never returns, a disk that stopped): its followers must then be free to
// elect another primary, which resent heartbeats would prevent for good.
const keepBeatsFor = 5 * time.Second

// due returns the heartbeats to send again at now: those of st's epoch,
// if st is a primary's and the loop has been busy at least interval and
// at most keepBeatsFor.
func (k *beatKeeper) due(now time.Time, interval time.Duration, st *replica.Status) []replica.Message {
	k.mu.Lock()
	defer k.mu.Unlock()
	busy := now.Sub(k.busySince)
	if k.busySince.IsZero() || busy < interval || busy > keepBeatsFor || st.Role != replica.Primary {
		return nil
	}
	var beats []replica.Message
	for _, m := range k.beats {
		if m.Epoch == st.Epoch {
			beats = append(beats, m)
		}
	}
	return beats
}

// contact returns the answer the node gives, for its busy partition loop,
// to heartbeat m from its primary: an acknowledgement of contact only (LSN
// 0, no Sent), which keeps the primary's check-quorum from counting this
// replica silent while the loop persists and executes a large batch (both
// followers are busy with the same batch, and the primary stepped down in
// a burst of 8 MiB writes every few seconds). It echoes no Sent, so it
// renews no lease: the loop has not seen m, and only its own answers
// promise that the replica refuses other candidates (voter grace). ok is
// false unless the loop has been busy a heartbeat interval (at most
// keepBeatsFor, as for the primary's side) and m is a heartbeat of the
// primary and epoch st follows.
func (k *beatKeeper) contact(now time.Time, interval time.Duration, st *replica.Status, self replica.ID, m replica.Message) (replica.Message, bool) {
	if m.Type != replica.MsgAppend || len(m.Entries) > 0 || st == nil || st.Role == replica.Primary ||
		m.From != st.Primary || m.Epoch != st.Epoch || m.To != self {
		return replica.Message{}, false
	}
	k.mu.Lock()
	busy := now.Sub(k.busySince)
	idle := k.busySince.IsZero()
	k.mu.Unlock()
	if idle || busy < interval || busy > keepBeatsFor {
		return replica.Message{}, false
	}
	return replica.Message{Type: replica.MsgAppendResp, From: self, To: m.From, Epoch: m.Epoch, Hint: st.Applied}, true
}
