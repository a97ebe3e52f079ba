// Package memnet is an in-memory network for memberlist
// (membership.Config.Transport), so one process can run a thousand
// members: each gets its own address, packets can be lost at a set rate,
// and a member can be cut off at once, as a SIGKILLed process would be.
// memberlist's own MockNetwork blocks a sender until the receiver reads
// and cannot lose or cut anything, so it cannot model either.
package memnet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Network connects Transports. Its methods are safe for concurrent use.
type Network struct {
	mu    sync.RWMutex
	byIP  map[string]*Transport
	next  uint32
	loss  atomic.Uint64 // math.Float64bits of the loss fraction
	rngMu sync.Mutex
	rng   *rand.Rand
}

// New returns an empty network losing no packet; seed draws the losses.
func New(seed uint64) *Network {
	return &Network{byIP: map[string]*Transport{}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Port is every member's port: members differ by address.
const Port = 7946

// packetQueue is how many packets a member holds unread before the network
// drops more, as a full socket buffer would.
const packetQueue = 4096

// SetLoss makes the network lose this fraction of packets (streams are
// reliable, as TCP is).
func (n *Network) SetLoss(fraction float64) {
	n.loss.Store(uint64(fraction * (1 << 32)))
}

func (n *Network) lose() bool {
	l := n.loss.Load()
	if l == 0 {
		return false
	}
	n.rngMu.Lock()
	defer n.rngMu.Unlock()
	return n.rng.Uint64N(1<<32) < l
}

// NewTransport returns a member's transport at a new address.
func (n *Network) NewTransport() *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	ip := net.IPv4(10, byte(n.next>>16), byte(n.next>>8), byte(n.next)).String()
	t := &Transport{net: n, ip: ip, addr: net.JoinHostPort(ip, strconv.Itoa(Port)),
		packets: make(chan *memberlist.Packet, packetQueue), streams: make(chan net.Conn, 64), closed: make(chan struct{})}
	n.byIP[ip] = t
	return t
}

func (n *Network) peer(addr string) (*Transport, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	n.mu.RLock()
	t := n.byIP[host]
	n.mu.RUnlock()
	if t == nil || t.down.Load() {
		return nil, fmt.Errorf("memnet: dial %s: %w", addr, errRefused)
	}
	return t, nil
}

var errRefused = errors.New("connection refused")

// Transport is one member's end of the network (memberlist.Transport).
type Transport struct {
	net       *Network
	ip, addr  string
	packets   chan *memberlist.Packet
	streams   chan net.Conn
	down      atomic.Bool
	closeOnce sync.Once
	closed    chan struct{}
	sent      atomic.Uint64
	received  atomic.Uint64
}

// Addr is the member's address.
func (t *Transport) Addr() string { return t.addr }

// Cut makes the member unreachable at once, both ways: what it sends is
// lost, and nothing reaches it (a SIGKILLed process, a pulled cable).
func (t *Transport) Cut() { t.down.Store(true) }

// Bytes is what the member sent and received so far, packets and streams.
func (t *Transport) Bytes() (sent, received uint64) { return t.sent.Load(), t.received.Load() }

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return net.ParseIP(t.ip), Port, nil
}

// WriteTo implements memberlist.Transport: the packet is lost at the
// network's rate, to or from a cut member, or when the receiver's queue
// is full.
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	t.sent.Add(uint64(len(b)))
	if t.down.Load() || t.net.lose() {
		return now, nil
	}
	dst, err := t.net.peer(addr)
	if err != nil {
		return now, nil // UDP: sent into the void
	}
	select {
	case dst.packets <- &memberlist.Packet{Buf: append([]byte(nil), b...), From: &net.UDPAddr{IP: net.ParseIP(t.ip), Port: Port}, Timestamp: now}:
		dst.received.Add(uint64(len(b)))
	case <-dst.closed:
	default:
	}
	return now, nil
}

// PacketCh implements memberlist.Transport.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout implements memberlist.Transport: a stream to a reachable
// member, counted both ways.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.down.Load() {
		return nil, fmt.Errorf("memnet: dial %s: %w", addr, errRefused)
	}
	dst, err := t.net.peer(addr)
	if err != nil {
		return nil, err
	}
	mine, theirs := net.Pipe()
	select {
	case dst.streams <- &counted{Conn: theirs, read: &dst.received, written: &dst.sent}:
		return &counted{Conn: mine, read: &t.received, written: &t.sent}, nil
	case <-dst.closed:
	case <-time.After(timeout):
	}
	mine.Close()
	theirs.Close()
	return nil, fmt.Errorf("memnet: dial %s: %w", addr, errRefused)
}

// StreamCh implements memberlist.Transport.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown implements memberlist.Transport.
func (t *Transport) Shutdown() error {
	t.closeOnce.Do(func() { close(t.closed) })
	return nil
}

// counted counts a stream's bytes into its member's totals.
type counted struct {
	net.Conn
	read, written *atomic.Uint64
}

func (c *counted) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(uint64(n))
	return n, err
}

func (c *counted) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(uint64(n))
	return n, err
}
