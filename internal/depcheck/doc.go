// Package depcheck holds the test that keeps the two wings of the
// repository apart: no product package (the root API, adapter, apps and
// internal) may depend on the lab (lab/: benchmarks, simulators, workloads,
// the demo, plotting, CSV) or on the lab's plotting, PDF and font stack, so
// a program that imports Neptune links none of it. The test lists each
// product package's dependencies with `go list -deps`, as tailscale's
// tstest/deptest does, and names the import chain of every offence.
package depcheck
