package sim

import (
	"slices"
	"testing"
	"time"
)

func TestEventsRunInTimeOrderTiesInSchedulingOrder(t *testing.T) {
	e := New[string](time.Unix(0, 0), 1)
	e.At(3, "c")
	e.At(1, "a1")
	e.At(2, "b")
	e.At(1, "a2")
	var got []string
	e.Run(func(ev string) {
		got = append(got, ev)
		if ev == "b" {
			e.After(0, "b-then") // same time, scheduled last: runs next
			e.At(0, "past")      // a past time means now
		}
	})
	want := []string{"a1", "a2", "b", "b-then", "past", "c"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if e.Now() != 3 || e.Time() != time.Unix(0, 3) {
		t.Fatalf("clock at %v (%v) after the last event at 3ns", e.Now(), e.Time())
	}
}

func TestRunUntilLeavesLaterEvents(t *testing.T) {
	e := New[func()](time.Unix(0, 0), 1)
	n := 0
	for i := range 10 {
		e.At(time.Duration(i)*time.Second, func() { n++ })
	}
	e.RunUntil(4*time.Second, func(f func()) { f() })
	if n != 5 || e.Len() != 5 {
		t.Fatalf("ran %d, %d left; want 5 and 5", n, e.Len())
	}
	if at, ok := e.Next(); !ok || at != 5*time.Second {
		t.Fatalf("next at %v %v", at, ok)
	}
}

func TestHeapOrdersManyEvents(t *testing.T) {
	e := New[int](time.Unix(0, 0), 1)
	rng := e.Rand(7)
	for i := range 5000 {
		e.At(time.Duration(rng.IntN(1000)), i)
	}
	last, prev := time.Duration(-1), -1
	e.Run(func(i int) {
		if e.Now() < last || (e.Now() == last && i < prev) {
			t.Fatalf("event %d at %v after event %d at %v", i, e.Now(), prev, last)
		}
		last, prev = e.Now(), i
	})
}

func TestStreamsAreSeededAndIndependent(t *testing.T) {
	a, b := New[int](time.Time{}, 5), New[int](time.Time{}, 5)
	if a.Rand(1).Uint64() != b.Rand(1).Uint64() {
		t.Fatal("same seed and stream, different numbers")
	}
	if a.Rand(1).Uint64() == a.Rand(2).Uint64() {
		t.Fatal("two streams of one seed agree")
	}
	if Rand(5, 1).Uint64() != a.Rand(1).Uint64() {
		t.Fatal("Rand and Engine.Rand differ")
	}
}
