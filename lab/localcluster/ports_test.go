package localcluster

import "testing"

// A restarted node binds its old gossip port again, so the ports handed
// out must be ones the kernel never gives a socket on its own, and never
// twice.
func TestFreePortIsBelowTheEphemeralRangeAndNotRepeated(t *testing.T) {
	lo, hi := listenerRange()
	seen := map[int]bool{}
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < lo || port >= hi {
			t.Fatalf("port %d outside %d-%d", port, lo, hi-1)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
