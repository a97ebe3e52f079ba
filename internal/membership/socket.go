package membership

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// sockets is memberlist's transport over one UDP socket and one TCP
// listener on the same address, as memberlist's NetTransport, but a
// received packet is read into one reused buffer and copied out at its
// size: NetTransport allocates 64 KiB for every packet it receives, which
// made the garbage collector an idle node's largest cost (some twenty
// packets a second, over a megabyte of garbage). Sends to an IP:port
// address skip the resolver.
//
// Concurrency: memberlist calls WriteTo and DialTimeout from many
// goroutines; one goroutine each reads the UDP socket and accepts on the
// listener, and both block on memberlist taking what they read.
type sockets struct {
	bindAddr string
	tcp      *net.TCPListener
	udp      *net.UDPConn
	packets  chan *memberlist.Packet
	streams  chan net.Conn
	logger   *log.Logger

	closing  chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*sockets)(nil)

const (
	// maxPacket is the largest UDP payload.
	maxPacket = 65536
	// udpReceiveBuffer is the socket receive buffer asked for (halved
	// until the kernel grants it), as NetTransport does.
	udpReceiveBuffer = 2 << 20
)

// bindSockets binds the transport memberlist would have bound for mc
// (retrying a picked port whose UDP side was taken, as memberlist does)
// and sets mc's ports to the bound one.
func bindSockets(mc *memberlist.Config) (*sockets, error) {
	tries := 1
	if mc.BindPort == 0 {
		tries = 10
	}
	var s *sockets
	var err error
	for range tries {
		if s, err = listenSockets(mc.BindAddr, mc.BindPort, mc.Logger); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gossip transport: %w", err)
	}
	if mc.BindPort == 0 {
		mc.BindPort = s.port()
		mc.AdvertisePort = mc.BindPort
	}
	return s, nil
}

func listenSockets(addr string, port int, logger *log.Logger) (*sockets, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return nil, fmt.Errorf("bind address %q is not an IP address", addr)
	}
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("TCP listener on %q port %d: %w", addr, port, err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		_ = tcp.Close()
		return nil, fmt.Errorf("UDP listener on %q port %d: %w", addr, port, err)
	}
	for size := udpReceiveBuffer; size > 0; size /= 2 {
		if err = udp.SetReadBuffer(size); err == nil {
			break
		}
	}
	if err != nil {
		_, _ = tcp.Close(), udp.Close()
		return nil, fmt.Errorf("UDP receive buffer: %w", err)
	}
	s := &sockets{bindAddr: addr, tcp: tcp, udp: udp, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn),
		logger: logger, closing: make(chan struct{})}
	s.wg.Add(2)
	go s.accept()
	go s.read()
	return s, nil
}

func (s *sockets) port() int { return s.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr is ip:port if ip is given, else the bound address
// (a private address of this host when bound to every interface).
func (s *sockets) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		a := net.ParseIP(ip)
		if a == nil {
			return nil, 0, fmt.Errorf("advertise address %q is not an IP address", ip)
		}
		if a4 := a.To4(); a4 != nil {
			a = a4
		}
		return a, port, nil
	}
	a := s.tcp.Addr().(*net.TCPAddr).IP
	if s.bindAddr == "0.0.0.0" {
		private, err := sockaddr.GetPrivateIP()
		if err != nil {
			return nil, 0, fmt.Errorf("interface addresses: %w", err)
		}
		if a = net.ParseIP(private); a == nil {
			return nil, 0, errors.New("no private IP address found, and no advertise address given")
		}
	}
	return a, s.port(), nil
}

func (s *sockets) WriteTo(b []byte, addr string) (time.Time, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		_, err = s.udp.WriteToUDPAddrPort(b, ap)
		return time.Now(), err
	}
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = s.udp.WriteTo(b, to)
	return time.Now(), err
}

func (s *sockets) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return s.WriteTo(b, a.Addr)
}

func (s *sockets) PacketCh() <-chan *memberlist.Packet { return s.packets }

func (s *sockets) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", addr)
}

func (s *sockets) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return s.DialTimeout(a.Addr, timeout)
}

func (s *sockets) StreamCh() <-chan net.Conn { return s.streams }

// Shutdown closes the sockets and waits for the reading goroutines; safe
// to call more than once.
func (s *sockets) Shutdown() error {
	s.stopOnce.Do(func() {
		close(s.closing)
		_, _ = s.tcp.Close(), s.udp.Close()
	})
	s.wg.Wait()
	return nil
}

func (s *sockets) stopped() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// accept hands incoming streams to memberlist, backing off on errors (a
// full file table) as NetTransport does.
func (s *sockets) accept() {
	defer s.wg.Done()
	var pause time.Duration
	for {
		c, err := s.tcp.AcceptTCP()
		if err != nil {
			if s.stopped() {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			s.logger.Printf("[ERR] memberlist: Error accepting TCP connection: %v", err)
			time.Sleep(pause)
			continue
		}
		pause = 0
		select {
		case s.streams <- c:
		case <-s.closing:
			_ = c.Close()
			return
		}
	}
}

// read hands incoming packets to memberlist, each copied out of one
// reused buffer.
func (s *sockets) read() {
	defer s.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		at := time.Now()
		if err != nil {
			if s.stopped() {
				return
			}
			s.logger.Printf("[ERR] memberlist: Error reading UDP packet: %v", err)
			continue
		}
		if n < 1 {
			continue
		}
		select {
		case s.packets <- &memberlist.Packet{Buf: bytes.Clone(buf[:n]), From: from, Timestamp: at}:
		case <-s.closing:
			return
		}
	}
}
