package replbench

import (
	"math"
	"testing"
)

func TestZipfWeightsHitImbalanceFactor(t *testing.T) {
	for _, tc := range []struct {
		n int
		f float64
	}{{16, 1.0 / 16}, {16, 1.0 / 8}, {16, 0.25}, {16, 0.5}, {16, 1}, {64, 1.0 / 64}, {64, 0.3}} {
		w := zipfWeights(tc.n, tc.f)
		if len(w) != tc.n {
			t.Fatalf("n=%d f=%v: %d weights", tc.n, tc.f, len(w))
		}
		var sum float64
		for i, x := range w {
			sum += x
			if i > 0 && x > w[i-1] {
				t.Fatalf("n=%d f=%v: weights not non-increasing at %d", tc.n, tc.f, i)
			}
		}
		if got := w[0] / sum; math.Abs(got-tc.f) > 1e-6 {
			t.Errorf("n=%d f=%v: most popular partition draws %v", tc.n, tc.f, got)
		}
	}
}
