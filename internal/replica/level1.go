package replica

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// Level 1: every replica accepts writes, executes them at once and pushes
// them to its peers; a periodic digest exchange (version vectors of
// per-origin sequence numbers) fills whatever a push lost. Writes from one
// origin apply in their order; across origins order may differ, which is why
// level 1 requires commutative writes.

func (r *Replica) proposeL1(now time.Time, w Write) {
	if r.phase == PhaseCheck {
		r.waiting = append(r.waiting, waiter{w: w, deadline: now.Add(r.cfg.WriteWait)})
		return
	}
	r.seq++
	e := Entry{LSN: r.last() + 1, Method: w.Method, Body: w.Body, Origin: r.cfg.ID, ReqID: w.ReqID, Seq: r.seq,
		WriteID: w.WriteID, Time: now.UnixNano()}
	if w.ReqID != 0 {
		r.pending[w.ReqID] = true
	}
	r.appendL1(e)
	for _, p := range r.peers {
		if r.alive[p] {
			r.send(Message{Type: MsgGossip, To: p, Entries: []Entry{e}})
		}
	}
}

func (r *Replica) appendL1(e Entry) {
	r.logAppend([]Entry{e})
	r.vv[e.Origin] = e.Seq
	r.commit = e.LSN // executed on arrival
}

func (r *Replica) tickL1() {
	if r.phase == PhaseCatchUp && r.caughtUpL1() {
		r.phase, r.role = PhaseServing, Secondary
		ws := r.waiting
		r.waiting = nil
		for _, w := range ws {
			r.proposeL1(r.now, w.w)
		}
	}
	for _, p := range r.peers {
		if r.alive[p] {
			r.send(Message{Type: MsgDigest, To: p, Versions: maps.Clone(r.vv)})
		}
	}
	r.truncateL1()
}

// truncateL1 drops the longest log prefix that this replica executed and
// every peer's last digest shows it holds, recording its version vector
// as the new base. A peer not yet heard from holds the log back.
func (r *Replica) truncateL1() {
	end := r.first - 1
	for _, e := range r.log {
		if e.LSN > r.applied || !r.heldByAllPeers(e) {
			break
		}
		end = e.LSN
	}
	if end < r.first {
		return
	}
	for _, e := range r.log[:end+1-r.first] {
		r.base[e.Origin] = max(r.base[e.Origin], e.Seq)
	}
	r.truncateTo(end)
	r.rd.TruncateBase = maps.Clone(r.base)
}

func (r *Replica) heldByAllPeers(e Entry) bool {
	for _, p := range r.peers {
		vv, ok := r.peerVV[p]
		if !ok || vv[e.Origin] < e.Seq {
			return false
		}
	}
	return true
}

// caughtUpL1: every live peer answered a digest with all it had.
func (r *Replica) caughtUpL1() bool {
	for _, p := range r.peers {
		if r.alive[p] && !r.synced[p] {
			return false
		}
	}
	return true
}

func (r *Replica) stepL1(m Message) {
	switch m.Type {
	case MsgDigest:
		r.peerVV[m.From] = maps.Clone(m.Versions)
		var es []Entry
		complete, size := true, 0
		for _, e := range r.log {
			if e.Seq > m.Versions[e.Origin] {
				if len(es) == r.cfg.MaxBatch || len(es) > 0 && size+e.size() > r.cfg.MaxBatchBytes {
					complete = false
					break
				}
				es = append(es, e)
				size += e.size()
			}
		}
		r.send(Message{Type: MsgGossip, To: m.From, Entries: es, InSync: complete})
	case MsgGossip:
		es := slices.Clone(m.Entries)
		slices.SortFunc(es, func(a, b Entry) int {
			return cmp.Or(cmp.Compare(a.Origin, b.Origin), cmp.Compare(a.Seq, b.Seq))
		})
		for _, e := range es {
			if e.Seq == r.vv[e.Origin]+1 {
				e.LSN, e.Epoch = r.last()+1, 0
				r.appendL1(e)
			}
		}
		if m.InSync {
			r.synced[m.From] = true
		}
	}
}
