package ratelimit

import (
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
