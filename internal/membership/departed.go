package membership

import (
	"cmp"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Why a member left the yellow pages.
const (
	// WhyGone: memberlist dropped it: its failure detector declared it
	// dead, or it left gracefully. memberlist's leave event does not say
	// which (the state it passes is not updated for the event), so
	// neither can the yellow pages.
	WhyGone = "gone"
	// WhyExpired: its announcement's TTL ran out before memberlist said
	// anything (it stopped announcing, or its announcements stopped
	// arriving).
	WhyExpired = "expired"
)

// Departure is the yellow pages' record of a member that left them, kept
// for DepartedRetention so that someone looking after the fact (a dashboard
// opened after a node died) still sees it, and why it went. It is the
// record in wire form, for the client (which turns it into the API's
// client.Departed, the one departed-member type) and the placement
// controller (which plans from its last announcement).
type Departure struct {
	Node string
	// Ann is its last announcement: its last addresses and what it
	// hosted.
	Ann *pb.Announcement
	// LastSeen is when its last announcement arrived; Left when it left
	// the pages.
	LastSeen, Left time.Time
	Why            string
}

// Departed members are kept as long as a lost member is rejoined
// (LostRetention), at most DepartedMax of them (the oldest departures go
// first), so the memory stays bounded under any churn.
const (
	DepartedRetention = LostRetention
	DepartedMax       = 1024
)

// departures is the bounded memory of departed members. Pure: time comes
// in as arguments; the zero value is ready.
type departures struct {
	m map[string]Departure
}

// add records that e's node left the pages at left, for why. A member
// already remembered (its entry expired, then memberlist dropped it)
// keeps its departure and takes the later, more specific
// reason.
func (d *departures) add(left time.Time, e *Entry, why string) {
	id := e.Ann.GetNodeId()
	if d.reason(id, why) {
		return
	}
	if d.m == nil {
		d.m = map[string]Departure{}
	}
	d.m[id] = Departure{Node: id, Ann: e.Ann, LastSeen: e.Seen, Left: left, Why: why}
	if len(d.m) > DepartedMax {
		oldest := ""
		for n, x := range d.m {
			if oldest == "" || x.Left.Before(d.m[oldest].Left) {
				oldest = n
			}
		}
		delete(d.m, oldest)
	}
}

// reason updates the reason of a member already remembered; false if it
// is not.
func (d *departures) reason(node, why string) bool {
	x, ok := d.m[node]
	if ok {
		x.Why = why
		d.m[node] = x
	}
	return ok
}

// returned forgets node: it announced itself again.
func (d *departures) returned(node string) { delete(d.m, node) }

// list drops departures older than DepartedRetention at now and returns
// the others, sorted by node id.
func (d *departures) list(now time.Time) []Departure {
	out := make([]Departure, 0, len(d.m))
	for n, x := range d.m {
		if now.Sub(x.Left) > DepartedRetention {
			delete(d.m, n)
			continue
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b Departure) int { return cmp.Compare(a.Node, b.Node) })
	return out
}
