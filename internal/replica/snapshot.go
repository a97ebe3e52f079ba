package replica

import (
	"slices"
	"time"
)

// Snapshots: when a follower needs one, and installing one.

// askShellForSnapshot puts a snapshot to peer id in the next Ready, unless
// one is already in flight.
func (r *Replica) askShellForSnapshot(now time.Time, id ID) {
	pr := r.progress[id]
	if pr.snapshotting(now) {
		return
	}
	pr.inSync = false
	pr.snapUntil = now.Add(r.cfg.SnapshotTimeout)
	r.rd.Snapshots = append(r.rd.Snapshots, id)
}

// SnapshotFailed tells the primary that the snapshot it asked for peer id
// was not installed (the transfer failed, or the peer refused it): it asks
// again the next time the peer shows it needs one, not after
// SnapshotTimeout.
func (r *Replica) SnapshotFailed(id ID) {
	if pr := r.progress[id]; pr != nil && r.role == Primary {
		pr.snapUntil = time.Time{}
	}
}

// WantsSnapshot reports whether this replica would install a snapshot
// that covers writes up to lsn, sent by primary from in epoch. The shell
// asks before it restores the service (InstallSnapshot must follow a
// restore): only a follower of that primary in that epoch, out of recovery
// phase 1, whose log diverged or that has not executed lsn yet.
func (r *Replica) WantsSnapshot(from ID, epoch Epoch, lsn LSN) bool {
	return r.cfg.Level != Level1 && r.phase != PhaseCheck && r.role != Primary && !r.electing && !r.storageFull &&
		epoch == r.epoch && from == r.primary && (r.diverged || lsn > r.applied)
}

// InstallSnapshot tells the replica that the shell replaced the service's
// state with a snapshot from its primary (after WantsSnapshot agreed) that
// covers every write up to lsn, whose entry had epoch lsnEpoch (0:
// unknown). The log restarts after lsn: everything before is executed,
// committed and dropped (including a diverged suffix: the service no
// longer reflects it). The next Ready carries Installed, for the wal, and
// the acknowledgement with which the primary resumes its appends at
// lsn+1.
//
// conf is the replica set the snapshot carries (the primary's Committed;
// nil: keep ours): it is committed, possibly at an LSN above lsn, whose
// entry then comes again with the log and changes nothing.
func (r *Replica) InstallSnapshot(now time.Time, lsn LSN, lsnEpoch Epoch, conf *ConfState) {
	r.observe(now)
	clear(r.log)
	r.log = nil
	r.first, r.prevEpoch = lsn+1, lsnEpoch
	r.stable, r.truncated = lsn, lsn
	r.commit, r.applied, r.handed = lsn, lsn, lsn
	r.hsDirty = true
	r.diverged = false
	r.role, r.phase, r.inSync = Recovering, PhaseCatchUp, false
	r.rd.Entries, r.rd.Apply, r.rd.Check, r.rd.Truncate = nil, nil, nil, 0
	r.rd.Installed = &Installed{LSN: lsn, Epoch: lsnEpoch}
	r.confLog = nil
	if conf != nil {
		r.committed = ConfState{LSN: conf.LSN, Members: slices.Clone(conf.Members)}
	}
	r.rd.ConfState = &ConfState{LSN: r.committed.LSN, Members: r.committed.Members}
	r.applyConf()
	if r.primary != "" {
		r.send(Message{Type: MsgAppendResp, To: r.primary, LSN: lsn, Hint: lsn, Snapshot: true})
	}
}
