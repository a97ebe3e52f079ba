// Package dactest helps test aggregation operators.
package dactest

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// CheckReducer reports through t whether reduce is commutative and
// associative, as every DAC Reduce operator must be, on n random triples
// drawn by gen from a fixed seed. Results are compared with
// reflect.DeepEqual, so gen should produce values in canonical form.
func CheckReducer[D any](t testing.TB, reduce func(a, b D) (D, error), gen func(*rand.Rand) D, n int) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	must := func(d D, err error) D {
		t.Helper()
		if err != nil {
			t.Fatalf("reduce: %v", err)
		}
		return d
	}
	for i := range n {
		a, b, c := gen(r), gen(r), gen(r)
		if ab, ba := must(reduce(a, b)), must(reduce(b, a)); !reflect.DeepEqual(ab, ba) {
			t.Errorf("reduce is not commutative (trial %d): reduce(%v, %v) = %v but reduce(b, a) = %v", i, a, b, ab, ba)
			return
		}
		left := must(reduce(must(reduce(a, b)), c))
		right := must(reduce(a, must(reduce(b, c))))
		if !reflect.DeepEqual(left, right) {
			t.Errorf("reduce is not associative (trial %d): (%v·%v)·%v = %v but %v·(%v·%v) = %v", i, a, b, c, left, a, b, c, right)
			return
		}
	}
}
