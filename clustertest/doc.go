// Package clustertest holds Neptune's integration tests: clusters of
// in-process nodes and of real node processes (cmd/neptune, built once per
// run), killed, paused, partitioned and restarted, with the shared helpers
// in helpers_test.go. It has no code of its own; the API it tests is the
// root package's.
package clustertest
