package membership

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/memberlist"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/ratelimit"
)

// limitedTransport is memberlist's network transport with a rate limit
// per source address on incoming streams. Joins arrive as streams (a
// push/pull with the join flag), and memberlist offers no hook that sees
// the remote address before it reads and decrypts a stream, so the limit
// sits in the transport: a stream over its source's rate is closed before
// memberlist spends anything on it.
type limitedTransport struct {
	*memberlist.NetTransport
	streams  chan net.Conn
	limit    *ratelimit.PerPeer
	clock    clock.Clock
	limited  atomic.Uint64
	done     chan struct{}
	stopOnce sync.Once
}

// newLimitedTransport binds the transport memberlist would have bound for
// mc (retrying a picked port, as memberlist does) and sets mc's ports to
// the bound one. The limit runs on real time, as memberlist does.
func newLimitedTransport(mc *memberlist.Config, perSecond float64, burst int) (*limitedTransport, error) {
	nt, err := bindNetTransport(mc)
	if err != nil {
		return nil, err
	}
	t := &limitedTransport{NetTransport: nt, streams: make(chan net.Conn), limit: ratelimit.New(perSecond, burst),
		clock: clock.Real(), done: make(chan struct{})}
	go t.forward()
	return t, nil
}

func (t *limitedTransport) forward() {
	in := t.NetTransport.StreamCh()
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
	return t.NetTransport.Shutdown()
}

// bindNetTransport binds the network transport memberlist would have bound
// for mc (retrying a picked port, as memberlist does) and sets mc's ports
// to the bound one: for a transport that wraps it.
func bindNetTransport(mc *memberlist.Config) (*memberlist.NetTransport, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger}
	tries := 1
	if mc.BindPort == 0 {
		tries = 10
	}
	var nt *memberlist.NetTransport
	var err error
	for range tries {
		if nt, err = memberlist.NewNetTransport(nc); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gossip transport: %w", err)
	}
	if mc.BindPort == 0 {
		mc.BindPort = nt.GetAutoBindPort()
		mc.AdvertisePort = mc.BindPort
	}
	return nt, nil
}
