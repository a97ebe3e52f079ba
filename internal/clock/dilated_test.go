package clock

import (
	"testing"
	"time"
)

func TestDilatedClockRunsSlower(t *testing.T) {
	origin := time.Unix(1000, 0)
	base := NewManual(origin)
	c := Dilated(base, origin, 4)
	if Dilation(c) != 4 || Dilation(base) != 1 {
		t.Fatalf("Dilation = %v, %v; want 4, 1", Dilation(c), Dilation(base))
	}
	timer := c.NewTimer(time.Second)
	fired := c.After(time.Second)
	base.Advance(2 * time.Second)
	if got := c.Now().Sub(origin); got != 500*time.Millisecond {
		t.Fatalf("after 2 s of base, dilated time advanced %v, want 500ms", got)
	}
	select {
	case <-fired:
		t.Fatal("a 1 s timer fired after 2 s of base; want 4 s")
	case <-timer.Chan():
		t.Fatal("a 1 s timer fired after 2 s of base; want 4 s")
	default:
	}
	base.Advance(2 * time.Second)
	<-fired
	<-timer.Chan()
	timer.Reset(time.Second)
	base.Advance(3 * time.Second)
	select {
	case <-timer.Chan():
		t.Fatal("a reset timer of 1 s fired after 3 s of base")
	default:
	}
	base.Advance(time.Second)
	<-timer.Chan()
	if got := c.Since(origin); got != 2*time.Second {
		t.Fatalf("Since(origin) = %v after 8 s of base, want 2s", got)
	}
}
