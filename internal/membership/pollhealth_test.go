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

// A replica that answers late is slow, not dead: its late answers keep
// it from being suspended, and one ends a suspension.
func TestPollHealthHeardLateIsNotSuspended(t *testing.T) {
	t0 := time.Unix(0, 0)
	h := NewPollHealth(3, time.Second)
	all := []string{"a", "b"}
	none := func(string) bool { return false }
	for range 5 {
		h.Observe(t0, []string{"b"}, none)
		h.Heard("b")
	}
	if got := h.Filter(t0, all); len(got) != 2 {
		t.Fatalf("b answered every poll late and was suspended: Filter = %v", got)
	}
	for range 3 {
		h.Observe(t0, []string{"b"}, none)
	}
	if got := h.Filter(t0, all); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("b silent for 3 polls: Filter = %v, want [a]", got)
	}
	h.Heard("b")
	if got := h.Filter(t0, all); len(got) != 2 {
		t.Fatalf("b heard after its suspension began: Filter = %v, want both", got)
	}
}
