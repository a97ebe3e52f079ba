package gagesim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// SizeFactor has mean 1 and the coefficient of variation asked, for each
// of Fig 5's; CV 0 is exactly 1.
func TestSizeFactorHasTheCVAsked(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, cv := range SizeCVs {
		const n = 400_000
		var s1, s2 float64
		for range n {
			x := SizeFactor(r, cv)
			s1, s2 = s1+x, s2+x*x
		}
		mean := s1 / n
		got := math.Sqrt(max(s2/n-mean*mean, 0)) / mean
		if math.Abs(mean-1) > 0.02 || math.Abs(got-cv) > 0.05*max(cv, 0.1) {
			t.Errorf("cv %v: mean %.4f, CV %.4f", cv, mean, got)
		}
	}
}

// A Fig 4 read costs a GRU from the page cache (its network) and two from
// the disk.
func TestFootprintCosts(t *testing.T) {
	if hit, miss := FootprintCosts(); hit != 1 || miss != 2 {
		t.Errorf("FootprintCosts() = %g, %g; want 1, 2", hit, miss)
	}
}
