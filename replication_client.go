package neptune

import (
	"slices"

	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// replView is what the yellow pages say about a replicated partition.
type replView struct {
	level   int
	primary string // the announced primary of the highest epoch
	// versionAgo is the announced primary's level-3 version x seconds ago
	// (stale by up to an announce interval: only a fallback).
	versionAgo uint64
	recovering map[string]bool
}

// replView returns the view of service's partition, false if it is not
// replicated.
func (c *Client) replView(service string, partition int32) (replView, bool) {
	var v replView
	var epoch uint64
	found := false
	for _, e := range c.gossip.Snapshot() {
		for _, s := range e.Ann.Services {
			if s.Name != service {
				continue
			}
			for _, r := range s.Replicas {
				if r.Partition != partition {
					continue
				}
				found = true
				v.level = int(r.Level)
				if r.Role == 0 {
					if v.recovering == nil {
						v.recovering = map[string]bool{}
					}
					v.recovering[e.Ann.NodeId] = true
				}
				if r.Role == 2 && r.Epoch >= epoch {
					epoch, v.primary, v.versionAgo = r.Epoch, e.Ann.NodeId, r.VersionAgo
				}
			}
		}
	}
	return v, found
}

// direct is the replica a call must go to without polling: a level-2/3
// write goes to the primary (a secondary would forward it).
func (v replView) direct(req *pb.CallRequest, ids []string) (string, bool) {
	if v.level >= 2 && Mode(req.Mode) == Write && slices.Contains(ids, v.primary) {
		return v.primary, true
	}
	return "", false
}

// candidates drops replicas announced as recovering, unless none is left.
func (v replView) candidates(ids []string) []string {
	kept := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return v.recovering[id] })
	if len(kept) == 0 {
		return ids
	}
	return kept
}

// mustPoll is who a read must poll besides the policy's choice: at level 3
// the primary, whose reply carries its current version of x seconds ago.
func (v replView) mustPoll(req *pb.CallRequest, ids []string) string {
	if v.level == 3 && Mode(req.Mode) == Read && slices.Contains(ids, v.primary) {
		return v.primary
	}
	return ""
}

// fresh keeps the replicas that may serve a read, judged from current poll
// replies (beyond the paper, which uses announced versions): serving, and
// at level 3 at or above both the primary's version x seconds ago and the
// session's floor req.MinVersion. If none qualifies, only the primary
// remains. ok is false when ids should stay as they are.
func (v replView) fresh(req *pb.CallRequest, ids []string, answers []transport.PollAnswer) (keep []string, ok bool) {
	if Mode(req.Mode) != Read || len(answers) == 0 {
		return nil, false
	}
	var floor uint64
	if v.level == 3 {
		floor = req.MinVersion
		ago := v.versionAgo
		for _, a := range answers {
			if a.Version.Primary {
				ago = a.Version.VersionAgo
			}
		}
		floor = max(floor, ago)
	}
	for _, a := range answers {
		if a.Version.Serving && a.Version.Version >= floor {
			keep = append(keep, a.Replica)
		}
	}
	if len(keep) == 0 {
		if v.level == 3 && slices.Contains(ids, v.primary) {
			return []string{v.primary}, true
		}
		return nil, false
	}
	return keep, true
}
