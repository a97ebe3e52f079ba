package client

import (
	"time"
)

// Departed is a member that left the yellow pages recently, as the
// client's gossip remembers it (membership.Gossip.Departures), so that a
// status page opened after a node died still shows that node and what
// it hosted. It is the one departed-member type (the API's
// neptune.DepartedMember; the dashboard's too); membership.Departure is
// the record it is made from.
type Departed struct {
	// Member is its last announcement: addresses and services (loads -1:
	// nobody polls a departed member); Age is since that announcement
	// arrived.
	Member
	// Partitions are the replicated partitions it hosted, each with only
	// its own replica, as last announced.
	Partitions []PartitionInfo
	// LastSeen is when its last announcement arrived, Left when it left
	// the pages.
	LastSeen, Left time.Time
	// Why it left: membership.WhyGone (memberlist declared it dead, or it
	// left) or membership.WhyExpired (its announcements stopped
	// arriving).
	Why string
}

// Departed returns the members that left the yellow pages recently
// (within membership.DepartedRetention, at most membership.DepartedMax of them),
// sorted by node; like Members it leaves out processes that hosted no
// service (clients, gateways).
func (c *Client) Departed() []Departed {
	now := c.clock.Now()
	var out []Departed
	for _, d := range c.gossip.Departures() {
		a := d.Ann
		if len(a.GetServices()) == 0 {
			continue
		}
		x := Departed{Member: memberOf(a, now.Sub(d.LastSeen)), LastSeen: d.LastSeen, Left: d.Left, Why: d.Why}
		for _, s := range a.Services {
			for _, r := range s.Replicas {
				x.Partitions = append(x.Partitions, PartitionInfo{Service: s.Name, Partition: int(r.Partition), Level: int(r.Level),
					Linearizable: r.Linearizable, Replicas: []ReplicaInfo{replicaInfo(d.Node, r)}})
			}
		}
		out = append(out, x)
	}
	return out
}
