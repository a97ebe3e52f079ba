package gage

import (
	"strings"
	"testing"
	"time"
)

func mustShaper(t *testing.T, cfg Config, o ShaperOptions) *Shaper {
	t.Helper()
	s, err := NewShaper(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// send offers one response of n bytes at now in chunks, each after the one
// before has gone, as the gateway writes; it returns when the last chunk
// goes.
func send(s *Shaper, now time.Time, sub string, n int) time.Time {
	p := s.Response(now, sub, n)
	for {
		due, k := p.Next(now)
		if k == 0 {
			return now
		}
		now = due
	}
}

// A 100 KB response of a 100 GRPS subscriber (200 KB/s of network at the
// default unit) is spread over about 0.3 s, not sent at once; its first
// chunk goes at once, and so does the first of a response after an idle
// spell.
func TestShaperSpreadsALargeResponseAtTheReservation(t *testing.T) {
	s := mustShaper(t, subs("s", 100.0), ShaperOptions{})
	last := send(s, t0, "s", 100_000)
	// The last chunk (1,696 bytes) goes after the six before it, 98,304
	// bytes at 1.25 times the larger of 200 KB/s and the 100 KB/s the
	// response itself brings the rate to.
	want := time.Duration(float64(6*16<<10) / (1.25 * 200_000) * float64(time.Second))
	if d := last.Sub(t0); d < want-time.Millisecond || d > want+time.Millisecond {
		t.Fatalf("last chunk at %v, want about %v", d, want)
	}
	later := t0.Add(2 * time.Second)
	if got, _ := s.Response(later, "s", 100).Next(later); !got.Equal(later) {
		t.Fatalf("first chunk after an idle spell held %v", got.Sub(later))
	}
}

// Served spare capacity at twice its reservation, a subscriber's pace
// follows its actual rate: the delay its chunks wait stays bounded instead
// of growing with a backlog.
func TestShaperFollowsARateAboveTheReservation(t *testing.T) {
	s := mustShaper(t, subs("s", 100.0), ShaperOptions{MaxDelay: time.Hour})
	const n = 10_000
	gap := time.Duration(float64(n) / 400_000 * float64(time.Second)) // 400 KB/s: 2x the reservation
	var worst time.Duration
	for i := range 2000 { // 50 s
		now := t0.Add(time.Duration(i) * gap)
		due, _ := s.Response(now, "s", n).Next(now)
		if i > 1000 {
			worst = max(worst, due.Sub(now))
		}
	}
	if worst > 100*time.Millisecond {
		t.Fatalf("responses held up to %v at a steady 2x the reservation; want the pace to follow the rate", worst)
	}
}

// The pace follows the responses' rate, not the chunks': a response far
// larger than a second of the reservation leaves at a pace that never
// rises on its own chunks (it eases as the response's share of the rate
// decays), where counting the chunks as they leave would speed it up
// without bound.
func TestShaperPacesALongResponseSteadily(t *testing.T) {
	s := mustShaper(t, subs("s", 100.0), ShaperOptions{MaxDelay: time.Minute, Chunk: 10_000})
	p := s.Response(t0, "s", 2_000_000)
	now, _ := p.Next(t0)
	var gap time.Duration
	for i := 1; i < 200; i++ {
		due, n := p.Next(now)
		if n != 10_000 {
			t.Fatalf("chunk %d is %d bytes, want 10,000", i, n)
		}
		if g := due.Sub(now); g < gap-time.Microsecond {
			t.Fatalf("chunk %d %v after the one before, sooner than the %v before it: the pace rose on its own chunks", i, g, gap)
		} else {
			gap = g
		}
		now = due
	}
}

// A response far larger than its subscriber's pace allows ends within
// MaxDelay all the same, and so does one queued behind others.
func TestShaperEndsAResponseWithinMaxDelay(t *testing.T) {
	const bound = 300 * time.Millisecond
	s := mustShaper(t, subs("s", 10.0), ShaperOptions{MaxDelay: bound})
	for i := range 20 { // 20 MB offered at once, every response at t0
		if d := send(s, t0, "s", 1<<20).Sub(t0); d > bound {
			t.Fatalf("response %d ended %v after it was ready, over MaxDelay", i, d)
		}
	}
}

// Subscribers without a reservation, and unknown ones, are not paced.
func TestShaperLeavesUnreservedSubscribersAlone(t *testing.T) {
	s := mustShaper(t, subs("s", 100.0, "free", 0.0), ShaperOptions{})
	for _, sub := range []string{"free", DefaultName, "nobody"} {
		if last := send(s, t0, sub, 10<<20); !last.Equal(t0) {
			t.Errorf("%s: paced to %v", sub, last.Sub(t0))
		}
	}
}

func TestShaperRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		o    ShaperOptions
		want string
	}{
		{subs("s", 1.0), ShaperOptions{Headroom: 0.5}, "headroom"},
		{subs("s", 1.0), ShaperOptions{MaxDelay: -time.Second}, "max delay"},
		{subs("s", 1.0), ShaperOptions{Chunk: -1}, "chunk"},
		{Config{Unit: Unit(Res(10*time.Millisecond, 0, 0)), Subscribers: []Subscriber{{Name: "s", Reservation: 1}}}, ShaperOptions{}, "unit.net"},
	} {
		if _, err := NewShaper(c.cfg, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewShaper(%+v): error %v, want one naming %q", c.o, err, c.want)
		}
	}
}

// A gateway with a tenth of a subscriber's reservation paces at a tenth of
// its rate: a 20,000-byte response of a 100 GRPS subscriber takes about
// 0.4 s (1.25 x 20 KB/s, above the 20 KB/s the response itself brings the
// rate to), not 0.04 s.
func TestShaperPacesAtTheGatewaysShare(t *testing.T) {
	s := mustShaper(t, subs("s", 100.0), ShaperOptions{MaxDelay: time.Minute, Chunk: 10_000})
	s.SetShare("s", 0.1)
	last := send(s, t0, "s", 20_000)
	want := time.Duration(float64(10_000) / (1.25 * 20_000) * float64(time.Second))
	if d := last.Sub(t0); d < want-time.Millisecond || d > want+time.Millisecond {
		t.Fatalf("second chunk at %v, want about %v", d, want)
	}
	s.SetShare("s", 2) // out of range: ignored
	s.SetShare("nobody", 0.5)
}
