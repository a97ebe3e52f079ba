package membership

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/ratelimit"
)

// limitedTransport is the network transport (sockets) with a rate limit
// per source address on incoming streams. Joins arrive as streams (a
// push/pull with the join flag), and memberlist offers no hook that sees
// the remote address before it reads and decrypts a stream, so the limit
// sits in the transport: a stream over its source's rate is closed before
// memberlist spends anything on it.
type limitedTransport struct {
	*sockets
	streams  chan net.Conn
	limit    *ratelimit.PerPeer
	clock    clock.Clock
	limited  atomic.Uint64
	done     chan struct{}
	stopOnce sync.Once
}

// newLimitedTransport limits the streams s accepts. The limit runs on
// real time, as memberlist does.
func newLimitedTransport(s *sockets, perSecond float64, burst int) *limitedTransport {
	t := &limitedTransport{sockets: s, streams: make(chan net.Conn), limit: ratelimit.New(perSecond, burst),
		clock: clock.Real(), done: make(chan struct{})}
	go t.forward()
	return t
}

func (t *limitedTransport) forward() {
	in := t.sockets.StreamCh()
	for {
		select {
		case <-t.done:
			return
		case c := <-in:
			if !t.allow(c.RemoteAddr()) {
				t.limited.Add(1)
				_ = c.Close()
				continue
			}
			select {
			case t.streams <- c:
			case <-t.done:
				_ = c.Close()
				return
			}
		}
	}
}

func (t *limitedTransport) allow(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return true // not an IP address: nothing to key a limit on
	}
	return t.limit.Allow(ap.Addr(), t.clock.Now())
}

// StreamCh is the incoming streams that passed the limit.
func (t *limitedTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown stops forwarding and closes the listeners.
func (t *limitedTransport) Shutdown() error {
	t.stopOnce.Do(func() { close(t.done) })
	return t.sockets.Shutdown()
}
