package sched

import (
	"testing"
	"time"
)

func TestFIFOOrderAndDeadlineDrops(t *testing.T) {
	t0 := time.Unix(0, 0)
	f := NewFIFO()
	a := &Request{Value: "a", Arrival: t0}
	b := &Request{Value: "b", Arrival: t0, Deadline: t0.Add(time.Second)}
	c := &Request{Value: "c", Arrival: t0, Deadline: t0.Add(time.Hour)}
	for _, r := range []*Request{a, b, c} {
		f.Push(t0, r)
	}
	if got, dropped := f.Pop(t0); got != a || len(dropped) != 0 {
		t.Fatalf("first pop = %v, %v; want a, none", got, dropped)
	}
	got, dropped := f.Pop(t0.Add(2 * time.Second))
	if got != c || len(dropped) != 1 || dropped[0] != b {
		t.Fatalf("second pop = %v, %v; want c with b dropped", got, dropped)
	}
	if got, _ := f.Pop(t0); got != nil || f.Len() != 0 {
		t.Fatalf("empty queue popped %v, len %d", got, f.Len())
	}
}

func TestFIFOCompactsWithoutLosingOrder(t *testing.T) {
	t0 := time.Unix(0, 0)
	f := NewFIFO()
	next := 0
	for i := range 1000 {
		f.Push(t0, &Request{Value: i})
		if i%3 == 0 {
			r, _ := f.Pop(t0)
			if r.Value != next {
				t.Fatalf("popped %v, want %d", r.Value, next)
			}
			next++
		}
	}
	for f.Len() > 0 {
		r, _ := f.Pop(t0)
		if r.Value != next {
			t.Fatalf("popped %v, want %d", r.Value, next)
		}
		next++
	}
	if next != 1000 {
		t.Fatalf("drained %d requests, want 1000", next)
	}
}
