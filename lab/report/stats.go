package report

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 <= p < 100) of sorted, the
// element below which p % of the values lie (nearest rank, no
// interpolation), or the zero value for no values.
func Percentile[T any](sorted []T, p float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	return sorted[min(int(float64(len(sorted))*p/100), len(sorted)-1)]
}

// Number is what Mean averages and Sum adds.
type Number interface {
	~int | ~int64 | ~float64
}

// Mean is the arithmetic mean of xs, or zero for none. Durations are
// averaged in whole nanoseconds.
func Mean[T Number](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	return Sum(xs) / T(len(xs))
}

// Sum is the sum of xs.
func Sum[T Number](xs []T) T {
	var sum T
	for _, x := range xs {
		sum += x
	}
	return sum
}

// MeanSD is the mean and the sample standard deviation of xs (0 for fewer
// than two values).
func MeanSD(xs []float64) (mean, sd float64) {
	mean = Mean(xs)
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}

// Summary describes a set of latencies.
type Summary struct {
	N              int
	Mean, P50, P99 time.Duration
}

// Summarize computes the summary of lats (which it does not modify).
func Summarize(lats []time.Duration) Summary {
	s := slices.Clone(lats)
	slices.Sort(s)
	return Summary{N: len(s), Mean: Mean(s), P50: Percentile(s, 50), P99: Percentile(s, 99)}
}

// Fmt formats d, one of s's latencies, as the tables print latencies:
// rounded to 10 µs, or "-" if s is of no latencies.
func (s Summary) Fmt(d time.Duration) string {
	if s.N == 0 {
		return "-"
	}
	return d.Round(10 * time.Microsecond).String()
}

// Verdict is how the check of a goal prints.
func Verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// Ms is d in (fractional) milliseconds, the unit of the tables and CSVs.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Timeline sums values into buckets of fixed width of the run's time, one
// row per bucket and one column per series: the per-second views of a run
// through failures.
type Timeline struct {
	width   time.Duration
	buckets [][]float64
}

// NewTimeline covers n buckets of width with series columns each.
func NewTimeline(width time.Duration, n, series int) *Timeline {
	t := &Timeline{width: width, buckets: make([][]float64, n)}
	for i := range t.buckets {
		t.buckets[i] = make([]float64, series)
	}
	return t
}

// Add adds v to series at time at; a time outside the timeline is
// ignored.
func (t *Timeline) Add(at time.Duration, series int, v float64) {
	if at < 0 {
		return
	}
	if b := int(at / t.width); b < len(t.buckets) {
		t.buckets[b][series] += v
	}
}

// Len is the number of buckets.
func (t *Timeline) Len() int { return len(t.buckets) }

// Start is the time bucket b begins at, in seconds.
func (t *Timeline) Start(b int) float64 { return float64(b) * t.width.Seconds() }

// Sum is what series added up to in bucket b.
func (t *Timeline) Sum(b, series int) float64 { return t.buckets[b][series] }

// Rate is Sum per second of the bucket's width.
func (t *Timeline) Rate(b, series int) float64 { return t.buckets[b][series] / t.width.Seconds() }
