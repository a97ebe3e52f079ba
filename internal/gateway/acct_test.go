package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/gage"
)

// With accounting_cycle set, answered requests' usage reaches the
// scheduler only when the cycle ends, summed per subscriber: until then
// the requests stay outstanding, charged their prediction. Without it,
// each answer's usage reaches the scheduler at once.
func TestAccountingCycleHoldsUsageUntilTheCycleEnds(t *testing.T) {
	for _, acct := range []time.Duration{0, 500 * time.Millisecond} {
		cfg, err := ParseConfig([]byte("capacity_grps: 100\nsubscribers: [{name: a, reservation: 50}, {name: b, reservation: 50}]\nroutes: [{service: s, method: m}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		gc := cfg.Gage()
		s, err := newScheduler("credit", gc, gage.Options{AccountingCycle: acct})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		s.SetCapacity(now, cfg.CapacityVector())
		l := newLoop(nil, s, nil, nil, time.Second, acct)
		for i, sub := range []string{"a", "a", "b"} {
			if err := s.Enqueue(now, gage.Request{ID: uint64(i), Subscriber: sub, Arrived: now}); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			if _, ok := s.Next(now); !ok {
				t.Fatalf("acct %v: not all three dispatched at once", acct)
			}
		}
		for _, sub := range []string{"a", "a", "b"} {
			l.used(now, gage.Usage{Subscriber: sub, Requests: 1, Used: gage.Res(20*time.Millisecond, 0, 0)})
		}
		want := 0
		if acct > 0 {
			want = 3
		}
		if got := outstanding(s); got != want {
			t.Errorf("acct %v: %d outstanding after the answers, want %d", acct, got, want)
		}
		l.flush(now.Add(acct))
		if got := outstanding(s); got != 0 {
			t.Errorf("acct %v: %d outstanding after the cycle, want 0", acct, got)
		}
		for _, q := range s.Queues() {
			if q.Subscriber != "default" && (q.Predicted < 1.9 || q.Predicted > 2.1) {
				t.Errorf("acct %v: %s predicted %.2f GRU, want 2 (20 ms of CPU)", acct, q.Subscriber, q.Predicted)
			}
		}
	}
}

func outstanding(s gage.Scheduler) int {
	n := 0
	for _, q := range s.Queues() {
		n += q.Outstanding
	}
	return n
}

func TestAccountingCycleMustNotBeNegative(t *testing.T) {
	_, err := ParseConfig([]byte("capacity_grps: 10\naccounting_cycle: -1s\nroutes: [{service: s, method: m}]\n"))
	if err == nil || !strings.Contains(err.Error(), "accounting_cycle:") {
		t.Errorf("error %v, want one naming accounting_cycle", err)
	}
}
