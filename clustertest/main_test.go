package clustertest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// repoRoot is the repository's root, relative to this package: the README
// the tour runs, the examples and the adapter's test program are there.
const repoRoot = ".."

// The neptune binary the node-process tests run, built once (neptuneBinary)
// into binDir, which TestMain removes when the tests are done.
var (
	binDir  string
	binOnce sync.Once
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "neptune-clustertest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
