package replication

import (
	"cmp"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// toPBStatus is st as announced and as promote answers it, at now (which
// the remaining lease is measured from).
func toPBStatus(partition int32, cfg replica.Config, linearizable bool, st replica.Status, now time.Time) *pb.ReplicaStatus {
	out := &pb.ReplicaStatus{Partition: partition, Role: int32(st.Role), Phase: int32(st.Phase), Epoch: uint64(st.Epoch),
		Primary: string(st.Primary), Version: uint64(st.Applied), Commit: uint64(st.Commit),
		VersionAgo: uint64(st.VersionAgo), Level: int32(cfg.Level), LeaseMs: transport.LeaseMillis(leaseLeft(st, now)),
		Diverged: st.Diverged, Linearizable: linearizable, Last: uint64(st.Last), Members: toPBPeers(st.Members)}
	contact, since := replica.JudgeContact(st, now, cmp.Or(cfg.AckTimeout, defaultAckTimeout), cmp.Or(cfg.Lease, defaultLease))
	if contact != replica.ContactOK {
		out.Contact, out.ContactLostMs = pb.Contact(contact), transport.LeaseMillis(now.Sub(since))
	}
	return out
}

// leaseLeft is what is left at now of the lease st shows (0 if none).
func leaseLeft(st replica.Status, now time.Time) time.Duration {
	if st.Role != replica.Primary || st.LeaseUntil.IsZero() || !now.Before(st.LeaseUntil) {
		return 0
	}
	return st.LeaseUntil.Sub(now)
}

func toPBMessage(k partKey, m replica.Message) *pb.ReplicaMessage {
	pm := &pb.ReplicaMessage{Service: k.service, Partition: k.partition, Type: int32(m.Type), From: string(m.From), To: string(m.To),
		Epoch: uint64(m.Epoch), PrevLsn: uint64(m.PrevLSN), PrevEpoch: uint64(m.PrevEpoch), Commit: uint64(m.Commit),
		Trunc: uint64(m.Trunc), InSync: m.InSync, Lsn: uint64(m.LSN), Reject: m.Reject, Hint: uint64(m.Hint),
		Granted: m.Granted, LastEpoch: uint64(m.LastEpoch), Sent: m.Sent, Transfer: m.Transfer, Echo: m.Echo, Snapshot: m.Snapshot, Restarted: m.Restarted,
		Members: toPBPeers(m.Members), MembersLsn: uint64(m.MembersAt), Leave: m.Leave}
	for _, e := range m.Entries {
		pm.Entries = append(pm.Entries, &pb.ReplicaEntry{Epoch: uint64(e.Epoch), Lsn: uint64(e.LSN), Method: e.Method,
			Body: e.Body, Origin: string(e.Origin), ReqId: e.ReqID, Seq: e.Seq, WriteId: e.WriteID, Time: e.Time})
	}
	if len(m.Versions) > 0 {
		pm.Versions = make(map[string]uint64, len(m.Versions))
		for id, v := range m.Versions {
			pm.Versions[string(id)] = v
		}
	}
	return pm
}

func fromPBMessage(pm *pb.ReplicaMessage) replica.Message {
	m := replica.Message{Type: replica.MsgType(pm.Type), From: replica.ID(pm.From), To: replica.ID(pm.To),
		Epoch: replica.Epoch(pm.Epoch), PrevLSN: replica.LSN(pm.PrevLsn), PrevEpoch: replica.Epoch(pm.PrevEpoch),
		Commit: replica.LSN(pm.Commit), Trunc: replica.LSN(pm.Trunc), InSync: pm.InSync, LSN: replica.LSN(pm.Lsn),
		Reject: pm.Reject, Hint: replica.LSN(pm.Hint), Granted: pm.Granted, LastEpoch: replica.Epoch(pm.LastEpoch),
		Sent: pm.Sent, Transfer: pm.Transfer, Echo: pm.Echo, Snapshot: pm.Snapshot, Restarted: pm.Restarted,
		Members: fromPBPeers(pm.Members), MembersAt: replica.LSN(pm.MembersLsn), Leave: pm.Leave}
	for _, e := range pm.Entries {
		m.Entries = append(m.Entries, replica.Entry{Epoch: replica.Epoch(e.Epoch), LSN: replica.LSN(e.Lsn), Method: e.Method,
			Body: e.Body, Origin: replica.ID(e.Origin), ReqID: e.ReqId, Seq: e.Seq, WriteID: e.WriteId, Time: e.Time})
	}
	if len(pm.Versions) > 0 {
		m.Versions = make(map[replica.ID]uint64, len(pm.Versions))
		for id, v := range pm.Versions {
			m.Versions[replica.ID(id)] = v
		}
	}
	return m
}

func toPBPeers(ps []replica.Peer) []*pb.ReplicaPeer {
	if len(ps) == 0 {
		return nil
	}
	out := make([]*pb.ReplicaPeer, len(ps))
	for i, p := range ps {
		out[i] = &pb.ReplicaPeer{Id: string(p.ID), Priority: int32(p.Priority), Learner: p.Learner}
	}
	return out
}

func fromPBPeers(ps []*pb.ReplicaPeer) []replica.Peer {
	if len(ps) == 0 {
		return nil
	}
	out := make([]replica.Peer, len(ps))
	for i, p := range ps {
		out[i] = replica.Peer{ID: replica.ID(p.Id), Priority: int(p.Priority), Learner: p.Learner}
	}
	return out
}
