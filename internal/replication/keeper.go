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
	interval := p.cfg.Heartbeat
	if interval <= 0 {
		interval = 50 * time.Millisecond // replica's default
	}
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
		st := p.status.Load()
		k := &p.keeper
		k.mu.Lock()
		stalled := !k.busySince.IsZero() && clk.Since(k.busySince) >= interval
		var beats []replica.Message
		if stalled && st.Role == replica.Primary {
			for _, m := range k.beats {
				if m.Epoch == st.Epoch {
					beats = append(beats, m)
				}
			}
		}
		k.mu.Unlock()
		for _, m := range beats {
			p.rt.send(p.key, m)
		}
	}
}
