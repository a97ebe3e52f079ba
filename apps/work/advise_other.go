//go:build !linux

package work

import "os"

// adviseRandom is a no-op where posix_fadvise is not at hand: a miss may
// read ahead.
func adviseRandom(*os.File) error { return nil }
