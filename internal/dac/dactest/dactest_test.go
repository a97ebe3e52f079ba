package dactest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// recorder captures failures so the test can check that CheckReducer
// reports them.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(f string, a ...any) {
	r.failed = true
	panic(fmt.Sprintf(f, a...))
}
func (r *recorder) Helper() {}

// topK merges two descending top-3 lists, the search service's reduce.
func topK(a, b []int) ([]int, error) {
	m := slices.Concat(a, b)
	slices.Sort(m)
	slices.Reverse(m)
	return m[:min(3, len(m))], nil
}

func TestCheckReducer(t *testing.T) {
	genInt := func(r *rand.Rand) int { return r.IntN(100) }
	genList := func(r *rand.Rand) []int {
		l := []int{r.IntN(50), r.IntN(50), r.IntN(50)}
		slices.Sort(l)
		slices.Reverse(l)
		return l
	}
	for _, tc := range []struct {
		name string
		run  func(tb testing.TB)
		ok   bool
	}{
		{"sum", func(tb testing.TB) { CheckReducer(tb, func(a, b int) (int, error) { return a + b, nil }, genInt, 50) }, true},
		{"top-k merge", func(tb testing.TB) { CheckReducer(tb, topK, genList, 50) }, true},
		{"subtraction", func(tb testing.TB) { CheckReducer(tb, func(a, b int) (int, error) { return a - b, nil }, genInt, 50) }, false},
		{"mean of two", func(tb testing.TB) {
			CheckReducer(tb, func(a, b float64) (float64, error) { return (a + b) / 2, nil }, func(r *rand.Rand) float64 { return float64(r.IntN(100)) }, 50)
		}, false},
		{"concatenation", func(tb testing.TB) {
			CheckReducer(tb, func(a, b []int) ([]int, error) { return slices.Concat(a, b), nil }, genList, 50)
		}, false},
	} {
		rec := &recorder{TB: t}
		tc.run(rec)
		if rec.failed == tc.ok {
			t.Errorf("%s: CheckReducer failed=%v, want %v", tc.name, rec.failed, !tc.ok)
		}
	}
}
