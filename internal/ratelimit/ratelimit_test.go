package ratelimit

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

func TestEachPeerHasItsOwnBucket(t *testing.T) {
	l := New(10, 2)
	now := time.Unix(1_000_000, 0)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if !l.Allow(a, now) || !l.Allow(a, now) {
		t.Fatal("burst of 2 refused")
	}
	if l.Allow(a, now) {
		t.Fatal("third event in the same instant allowed")
	}
	if !l.Allow(b, now) {
		t.Fatal("another peer was limited by the first")
	}
	if !l.Allow(a, now.Add(100*time.Millisecond)) {
		t.Fatal("a token did not come back after 1/rate")
	}
	// IPv4-mapped IPv6 is the same peer.
	if l.Allow(netip.MustParseAddr("::ffff:10.0.0.1"), now.Add(100*time.Millisecond)) {
		t.Fatal("the mapped form of a limited address was allowed")
	}
}

func TestIdlePeersAreForgotten(t *testing.T) {
	l := New(10, 2)
	now := time.Unix(1_000_000, 0)
	for i := range 100 {
		l.Allow(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), now)
	}
	if l.Len() != 100 {
		t.Fatalf("tracking %d peers", l.Len())
	}
	l.Allow(netip.MustParseAddr("10.1.0.0"), now.Add(2*time.Minute))
	if l.Len() != 1 {
		t.Fatalf("tracking %d peers after they went idle, want 1", l.Len())
	}
}

func TestEveryAdmitsOnePerKeyPerIntervalAndCountsTheRest(t *testing.T) {
	e := NewEvery(10 * time.Second)
	now := time.Unix(1_000_000, 0)
	if ok, n := e.Allow("a", now); !ok || n != 0 {
		t.Fatalf("first event: %v, %d held back", ok, n)
	}
	for i := range 5 {
		if ok, _ := e.Allow("a", now.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("event %d within the interval admitted", i)
		}
	}
	if ok, _ := e.Allow("b", now.Add(time.Second)); !ok {
		t.Fatal("another key was held back by the first")
	}
	if ok, n := e.Allow("a", now.Add(10*time.Second)); !ok || n != 5 {
		t.Fatalf("after the interval: %v, %d held back, want true, 5", ok, n)
	}
	if ok, n := e.Allow("a", now.Add(30*time.Second)); !ok || n != 0 {
		t.Fatalf("after a quiet interval: %v, %d held back, want true, 0", ok, n)
	}
}

func TestEveryBoundsItsKeys(t *testing.T) {
	e := NewEvery(time.Minute)
	now := time.Unix(1_000_000, 0)
	admitted := 0
	for i := range MaxPeers + 100 {
		if ok, _ := e.Allow(fmt.Sprint(i), now); ok {
			admitted++
		}
	}
	if admitted != MaxPeers+1 {
		t.Fatalf("%d of %d distinct keys admitted within one interval, want %d (the excess shares one line)", admitted, MaxPeers+100, MaxPeers+1)
	}
	if ok, n := e.Allow("late", now.Add(time.Minute)); !ok || n != 0 {
		t.Fatalf("a new key after the interval: %v, %d", ok, n)
	}
}
