package neptune

import (
	"testing"
	"time"
)

// TestOneFailedReplicateCallIsNotDeath: a single failed call (a busy peer
// timing out) leaves the peer alive; suspectAfter in a row make it dead
// for replSuspectFor; hearing from it clears both.
func TestOneFailedReplicateCallIsNotDeath(t *testing.T) {
	rn := &replNode{suspect: map[string]time.Time{}, heard: map[string]time.Time{}, failed: map[string]int{}}
	alive := func() bool { return rn.alive("p", time.Now(), true, false, 500*time.Millisecond) }
	rn.noteFailed("p")
	if !alive() {
		t.Fatal("dead after one failed call")
	}
	rn.noteHeard("p")
	rn.noteFailed("p")
	if !alive() {
		t.Fatal("dead after failed, heard, failed: the count did not reset")
	}
	rn.noteFailed("p")
	if alive() {
		t.Fatalf("alive after %d failed calls in a row", suspectAfter)
	}
	rn.noteHeard("p")
	if !alive() {
		t.Fatal("still dead after hearing from the peer")
	}
	rn.noteUnreachable("p") // a forwarded write found it unreachable
	if alive() {
		t.Fatal("alive right after a forward found it unreachable")
	}
}
