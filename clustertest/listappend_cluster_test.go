package clustertest

import (
	"testing"
	"time"
)

// TestListAppendExactlyOnceThroughPrimaryKills: many appenders through a
// client that retries every retryable error, the primary SIGKILLed and
// restarted every few seconds (level 2): every append is applied exactly
// once and the replicas end identical.
func TestListAppendExactlyOnceThroughPrimaryKills(t *testing.T) {
	runListAppend(t, 2, 35*time.Second, 5*time.Second)
}

// TestListAppendExactlyOnceLevel3 is a shorter level-3 run.
func TestListAppendExactlyOnceLevel3(t *testing.T) {
	runListAppend(t, 3, 15*time.Second, 5*time.Second)
}
