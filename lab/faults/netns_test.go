package faults

import (
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inNS runs f on a thread moved into namespace ns; the thread is thrown
// away afterwards (the goroutine exits locked), so no other code runs in ns.
func inNS(ns string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := os.Open("/run/netns/" + ns)
		if err != nil {
			done <- err
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}

// Dial timeouts: one through a silent cut must time out (it waits
// cutWait); one that must connect waits reachWait, past TCP's and ARP's
// 1 s retransmissions, so a first packet lost on a loaded machine (a
// switch port that has not learnt the address yet) does not read as a cut.
const (
	cutWait   = 700 * time.Millisecond
	reachWait = 3 * time.Second
)

func dialFrom(ns, addr string, timeout time.Duration) error {
	return inNS(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// TestNetCutsAndHeals checks the network under the nemeses: hosts reach
// each other over the switch, a cut drops their traffic (silently with
// nft: the dial times out instead of failing at once) while the observer
// still reaches both, and a heal restores it; Close leaves nothing.
func TestNetCutsAndHeals(t *testing.T) {
	if err := Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("faults: CI is set but network namespaces cannot be made: %v", err)
		}
		t.Skipf("!!! NETWORK NAMESPACE TEST NOT RUN: %v", err)
	}
	n, err := NewNet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	a, err := n.AddHost("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.AddHost("b")
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	if err := inNS(b.NS, func() (err error) { l, err = net.Listen("tcp", b.IP+":9000"); return err }); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	target := b.IP + ":9000"
	if err := dialFrom(a.NS, target, reachWait); err != nil {
		t.Fatalf("a cannot reach b before any cut: %v", err)
	}
	if err := n.Cut("a", "b"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = dialFrom(a.NS, target, cutWait)
	if err == nil {
		t.Fatal("a reached b through a cut")
	}
	var ne net.Error
	if n.Silent && (!errors.As(err, &ne) || !ne.Timeout() || time.Since(start) < 500*time.Millisecond) {
		t.Errorf("a silent cut should time out, got %v after %v", err, time.Since(start))
	}
	if c, err := net.DialTimeout("tcp", target, reachWait); err != nil {
		t.Errorf("the observer lost b during a cut: %v", err)
	} else {
		c.Close()
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(a.NS, target, reachWait); err != nil {
		t.Fatalf("a cannot reach b after the heal: %v", err)
	}
	// The fallback without nft: blackhole routes in the hosts.
	n.Silent = false
	if err := n.Cut("a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(a.NS, target, cutWait); err == nil {
		t.Fatal("a reached b through a blackhole cut")
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(a.NS, target, reachWait); err != nil {
		t.Fatalf("a cannot reach b after the blackhole heal: %v", err)
	}
	n.Close()
	if _, err := os.Stat("/run/netns/" + a.NS); !os.IsNotExist(err) {
		t.Errorf("namespace %s left after Close: %v", a.NS, err)
	}
}
