package membership

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/memberlist"
)

// Identity is what a member tells the others about itself at join, beside
// its name, and what it checks of theirs. It rides in memberlist's node
// meta (at most memberlist.MetaMaxSize bytes), which every member receives
// with the member's alive message and in push/pull state, so a joiner
// knows every live member's before Start returns.
type Identity struct {
	// Meta is this member's node meta: the node puts its cluster name and
	// a summary of each replicated service's configuration in it.
	Meta []byte
	// Check, if set, runs once Start has joined: it sees every other live
	// member's Meta and refuses the start by returning an error.
	Check func(peers []Peer) error
	// OnConflict, if set, hears of a member that claims this member's
	// name from another address after Start returned (this member keeps
	// the name; memberlist ignores the other).
	OnConflict func(other string)
}

// Peer is another live member as Identity.Check sees it.
type Peer struct {
	Name, Addr string
	Meta       []byte
}

// ErrDuplicateID is returned by Start when a live member at another
// address already has this member's name.
var ErrDuplicateID = errors.New("node id already in use")

// conflicts is memberlist's ConflictDelegate: memberlist calls it when an
// alive message names a member it knows at another address. When that
// member is this one, someone else claims our name. During Start (the
// join's push/pull) that means the name was taken before we came: we are
// the newcomer and must refuse. Later it is a newcomer with our name:
// memberlist already ignores it, and it refuses itself.
type conflicts struct {
	mu       sync.Mutex
	self     string
	starting bool
	dup      string // address of the live member with our name, seen while starting
	later    func(other string)
}

func (c *conflicts) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name != c.self {
		return // two others disagree; not ours to settle
	}
	c.mu.Lock()
	starting := c.starting
	if starting && c.dup == "" {
		c.dup = other.Address()
	}
	later := c.later
	c.mu.Unlock()
	if !starting && later != nil {
		later(other.Address())
	}
}

// started ends the joining phase and returns the duplicate seen in it, if
// any.
func (c *conflicts) started() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starting = false
	return c.dup
}

// checkJoined refuses a start whose name is taken or whose Identity.Check
// fails against the live members.
func (g *Gossip) checkJoined() error {
	if dup := g.conflicts.started(); dup != "" {
		return fmt.Errorf("membership: node id %q is live at %s in this cluster; another process already serves it (if that process died, wait until the cluster notices, or restart it on its old address): %w",
			g.cfg.NodeID, dup, ErrDuplicateID)
	}
	if g.cfg.Identity.Check == nil {
		return nil
	}
	var peers []Peer
	for _, n := range g.memberCopies() {
		if n.Name == g.cfg.NodeID {
			continue
		}
		peers = append(peers, Peer{Name: n.Name, Addr: n.Address(), Meta: n.Meta})
	}
	return g.cfg.Identity.Check(peers)
}
