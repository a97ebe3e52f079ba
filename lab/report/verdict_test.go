package report

import (
	"math"
	"strings"
	"testing"
)

func TestCheckOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *Check
		want Outcome
	}{
		{"met", AtMost("x ≤ 1", 0.9, 1, "0.9"), Pass},
		{"missed", AtMost("x ≤ 1", 1.1, 1, "1.1"), Fail},
		{"at least missed", AtLeast("x ≥ 2", 1.5, 2, "1.5"), Fail},
		{"at least met", AtLeast("x ≥ 2", 2, 2, "2"), Pass},
		// A starved cell is never PASS, met or not.
		{"met but starved", AtMost("x ≤ 1", 0.24, 1, "0.24").Doubt(true, "client CPU-starved"), Inconclusive},
		{"missed and starved", AtMost("x ≤ 1", 3, 1, "3").Doubt(true, "client CPU-starved"), Inconclusive},
		{"no doubt when false", AtMost("x ≤ 1", 0.5, 1, "0.5").Doubt(false, "starved"), Pass},
		// A ratio to a zero baseline decides nothing.
		{"infinite ratio", AtLeast("x ≥ 1.25", math.Inf(1), 1.25, "∞"), Inconclusive},
		{"NaN", AtLeast("x ≥ 35", math.NaN(), 35, "NaN"), Inconclusive},
	} {
		if got := tc.c.Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v (%s)", tc.name, got, tc.want, tc.c)
		}
		if !strings.HasPrefix(tc.c.String(), tc.want.String()+"  ") {
			t.Errorf("%s: line %q does not start with its verdict", tc.name, tc.c)
		}
	}
}

func TestRoundsMustAgree(t *testing.T) {
	for _, tc := range []struct {
		whole  float64
		rounds []bool
		want   Outcome
	}{
		{0.5, []bool{true, true, true}, Pass},
		{2, []bool{false, false}, Fail},
		{0.5, []bool{true, false, true}, Inconclusive},
		{2, []bool{false, true}, Inconclusive},
		{0.5, []bool{true}, Inconclusive}, // one round shows no noise
		{2, []bool{false}, Inconclusive},
	} {
		c := Rounds(AtMost("x ≤ 1", tc.whole, 1, "x"), tc.rounds)
		if c.Outcome() != tc.want {
			t.Errorf("whole %v rounds %v: %v, want %v", tc.whole, tc.rounds, c.Outcome(), tc.want)
		}
	}
}

func TestInconclusiveSaysWhy(t *testing.T) {
	c := AtMost("p99 ≤ 1.5× healthy", 0.24, 1.5, "0.24×").Doubt(true, "healthy row starved (lag %.1f ms)", 6.2)
	if s := c.String(); !strings.Contains(s, "INCONCLUSIVE") || !strings.Contains(s, "lag 6.2 ms") {
		t.Errorf("line %q", s)
	}
	if got := Tally(c, AtMost("a", 0, 1, ""), AtMost("b", 2, 1, "")); got != "1 PASS, 1 FAIL, 1 INCONCLUSIVE" {
		t.Errorf("tally %q", got)
	}
}
