package replication

import (
	"github.com/neptune-cluster/neptune/internal/replica"
	"testing"
	"time"
)

// For the external tests (package replication_test), which run real
// services that import this package through the node (apps/forum).

// MemCluster is memCluster for them.
type MemCluster = memCluster

// NewMemCluster starts nodes a, b, c over stores from newStore, writing
// with method and body.
func NewMemCluster(t *testing.T, newStore func() TestStore, method string, body func(i, size int) []byte) *MemCluster {
	return newMemClusterOf(t, newStore, method, body)
}

func (c *memCluster) Advance(d time.Duration)   { c.advance(d) }
func (c *memCluster) Write(from, n, size int)   { c.write(from, n, size) }
func (c *memCluster) Wipe(id string)            { c.wipe(id) }
func (c *memCluster) Stop(id string)            { c.stop(id) }
func (c *memCluster) Start(id string)           { c.start(id) }
func (c *memCluster) Primary() string           { return c.primary() }
func (c *memCluster) Store(id string) TestStore { return c.stores[id] }

// LogFirst is the first LSN id's write log holds.
func (c *memCluster) LogFirst(id string) (first uint64) {
	c.onLoop(id, func(p *part) { first = uint64(p.log.First()) })
	return first
}

// Serving reports whether id's replica serves, not diverged.
func (c *memCluster) Serving(id string) bool {
	st := c.part(id).status.Load()
	return st.Phase == replica.PhaseServing && !st.Diverged
}

// Installed is how many snapshots were installed.
func (c *memCluster) Installed() int {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	n := 0
	for _, a := range c.net.acks {
		if a.Installed {
			n++
		}
	}
	return n
}
