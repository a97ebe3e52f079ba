//go:build race

package lbsim

// The race detector slows the simulator about tenfold; tests shrink their
// runs when it is on.
func init() { raceEnabled = true }
