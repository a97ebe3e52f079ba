package localcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// FreePort finds a port free for both TCP and UDP on 127.0.0.1 (memberlist
// needs both) that no earlier call in this process handed out.
//
// It picks below the kernel's ephemeral range: a node restarted after
// SIGKILL binds its old gossip port again, and a port inside that range
// can meanwhile be taken by any socket the kernel numbers itself (every
// node's poll socket, each outgoing connection), which failed a restart in
// CI with "address already in use". Outside the range only an explicit
// bind can take it.
func FreePort() (int, error) {
	lo, hi := listenerRange()
	ports.mu.Lock()
	defer ports.mu.Unlock()
	for range 200 {
		port := lo + rand.IntN(hi-lo)
		if ports.given[port] || !bindable(port) {
			continue
		}
		ports.given[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("localcluster: no free port in %d-%d", lo, hi-1)
}

var ports = struct {
	mu    sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// listenerRange is the 12,000 ports below the ephemeral range (Linux:
// /proc/sys/net/ipv4/ip_local_port_range, usually from 32768), never
// below 10000.
func listenerRange() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return max(10000, hi-12000), max(hi, 11000)
}

func bindable(port int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
