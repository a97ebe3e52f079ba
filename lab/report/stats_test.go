package report

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	xs := make([]int, 200)
	for i := range xs {
		xs[i] = i
	}
	for _, tc := range []struct {
		p    float64
		want int
	}{{0, 0}, {50, 100}, {99, 198}, {99.9, 199}} {
		if got := Percentile(xs, tc.p); got != tc.want {
			t.Errorf("p%v of 0..199 = %d, want %d", tc.p, got, tc.want)
		}
	}
	// The integer rule n*99/100 the experiments used, for every size.
	for n := 1; n < 2000; n++ {
		if got, want := int(float64(n)*99/100), n*99/100; got != want {
			t.Fatalf("n=%d: index %d, want %d", n, got, want)
		}
	}
	if Percentile([]time.Duration(nil), 99) != 0 {
		t.Error("p99 of nothing is not zero")
	}
}

func TestMeanSD(t *testing.T) {
	m, sd := MeanSD([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if m != 5 || math.Abs(sd-2.138) > 1e-3 {
		t.Fatalf("MeanSD = %v, %v; want 5, 2.138", m, sd)
	}
	if m, sd := MeanSD([]float64{3}); m != 3 || sd != 0 {
		t.Fatalf("one sample: %v, %v", m, sd)
	}
	if Mean([]time.Duration{1, 2, 4}) != 2 || Mean([]int(nil)) != 0 {
		t.Fatal("Mean of durations truncates to whole nanoseconds; of nothing is zero")
	}
}

func TestSummarizeLeavesItsInputAlone(t *testing.T) {
	lats := []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}
	s := Summarize(lats)
	if s.N != 3 || s.Mean != 2*time.Millisecond || s.P50 != 2*time.Millisecond || s.P99 != 3*time.Millisecond {
		t.Fatalf("summary %+v", s)
	}
	if lats[0] != 3*time.Millisecond {
		t.Fatal("Summarize sorted its input")
	}
	if got := s.Fmt(1234567 * time.Nanosecond); got != "1.23ms" {
		t.Errorf("Fmt = %q", got)
	}
	if got := (Summary{}).Fmt(0); got != "-" {
		t.Errorf("Fmt of an empty summary = %q", got)
	}
}

func TestTimelineBuckets(t *testing.T) {
	tl := NewTimeline(250*time.Millisecond, 4, 2)
	tl.Add(0, 0, 1)
	tl.Add(300*time.Millisecond, 1, 2)
	tl.Add(999*time.Millisecond, 1, 1)
	tl.Add(time.Second, 0, 1) // past the end
	tl.Add(-time.Millisecond, 0, 1)
	if tl.Len() != 4 || tl.Sum(0, 0) != 1 || tl.Sum(1, 1) != 2 || tl.Rate(3, 1) != 4 || tl.Start(2) != 0.5 {
		t.Fatalf("timeline %+v", tl.buckets)
	}
}

func TestTableCSVAndPrint(t *testing.T) {
	tb := NewTable("name", "ms")
	tb.Addf("%s,%.1f", "a, b", 1.25)
	tb.Add("c", "2")
	path := filepath.Join(t.TempDir(), "t.csv")
	if err := tb.Save(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := "name,ms\n\"a, b\",1.2\nc,2\n"; string(b) != want {
		t.Fatalf("csv %q, want %q", b, want)
	}
	var out bytes.Buffer
	tb.Print(&out)
	if want := "  name   ms\n  a, b  1.2\n     c    2\n\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}
