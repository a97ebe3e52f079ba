package clustertest

import (
	"testing"
	"time"
)

// TestListAppendExactlyOnceLevel1: level 1 (every replica takes writes
// and gossips them), the node a third of the writes go to SIGKILLed and
// restarted every few seconds, a client that retries every retryable
// error (the retry may land on another replica): every acknowledged
// append is on every replica once, and the replicas end with the same
// elements. A write retried at a second replica before the first one's
// copy reached it runs once on each replica: each skips the copy whose
// identity it already applied (replication.skipExecuted).
func TestListAppendExactlyOnceLevel1(t *testing.T) {
	runListAppend(t, 1, 20*time.Second, 4*time.Second)
}
