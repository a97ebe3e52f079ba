//go:build !linux || !cgo

package replication

// trimCHeap is a no-op without cgo (pebble then allocates in the Go heap)
// or off Linux.
func trimCHeap() {}

// tuneCHeap is a no-op without cgo or off Linux.
func tuneCHeap() {}
