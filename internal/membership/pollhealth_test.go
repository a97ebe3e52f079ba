package membership

import (
	"slices"
	"testing"
	"time"
)

func TestPollHealthSuspendsAfterMissesAndForgivesLater(t *testing.T) {
	t0 := time.Unix(0, 0)
	h := NewPollHealth(3, time.Second)
	all := []string{"a", "b", "c"}
	onlyA := func(id string) bool { return id == "a" }
	for i := range 2 {
		h.Observe(t0, []string{"a", "b"}, onlyA)
		if got := h.Filter(t0, all); len(got) != 3 {
			t.Fatalf("after %d misses b is already filtered: %v", i+1, got)
		}
	}
	h.Observe(t0, []string{"a", "b"}, func(string) bool { return true }) // an answer resets the count
	for range 3 {
		h.Observe(t0, []string{"b"}, onlyA)
	}
	if got := h.Filter(t0.Add(999*time.Millisecond), all); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("b missed 3 in a row: Filter = %v, want [a c]", got)
	}
	if got := h.Filter(t0.Add(time.Second), all); len(got) != 3 {
		t.Fatalf("b's suspension should end after 1s: %v", got)
	}
}

func TestPollHealthNeverFiltersEveryReplica(t *testing.T) {
	t0 := time.Unix(0, 0)
	h := NewPollHealth(1, time.Minute)
	h.Observe(t0, []string{"a", "b"}, func(string) bool { return false })
	if got := h.Filter(t0, []string{"a", "b"}); len(got) != 2 {
		t.Fatalf("every replica suspended: Filter = %v, want both back", got)
	}
}
