package clustertest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// repoRoot is the repository's root, relative to this package: the README
// the tour runs, the examples and the adapter's test program are there.
const repoRoot = ".."

// The neptune binary the node-process tests run, built by TestMain into
// binDir (before any test's deadline starts: a cold build takes minutes),
// which TestMain removes when the tests are done.
var (
	binDir  string
	binOnce sync.Once
	binPath string
	binErr  error
)

// buildBinary builds the neptune binary once.
func buildBinary() {
	binOnce.Do(func() {
		binPath = filepath.Join(binDir, "neptune")
		if out, err := exec.Command("go", "build", "-o", binPath, "github.com/neptune-cluster/neptune/cmd/neptune").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
}

// stuckAfter is how long one test may run before the watchdog ends the
// binary: the slowest takes about a minute under the race detector, and
// go test's own -timeout (30 min in CI) would print the culprit's name
// above a goroutine dump too long to read to its top.
const stuckAfter = 6 * time.Minute

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "neptune-clustertest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	if !testing.Short() {
		buildBinary()
	}
	go watchdog(stuckAfter, 10*time.Second)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testFrame finds the top-level test a goroutine's stack belongs to.
var testFrame = regexp.MustCompile(`neptune/clustertest\.(Test\w+)`)

// watchdog samples the running tests every period; when one has run for
// limit, it prints every goroutine's stack and then, last (where a
// truncated CI log still shows it), the test's name, and exits.
func watchdog(limit, period time.Duration) {
	since := map[string]time.Time{}
	buf := make([]byte, 1<<20)
	for range time.Tick(period) {
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		now := time.Now()
		// A test runs in testing.tRunner; goroutines it left behind do not.
		var running []string
		for _, g := range bytes.Split(buf, []byte("\n\n")) {
			if m := testFrame.FindSubmatch(g); m != nil && string(m[1]) != "TestMain" && bytes.Contains(g, []byte("testing.tRunner(")) {
				running = append(running, string(m[1]))
			}
		}
		for name := range since {
			if !slices.Contains(running, name) {
				delete(since, name)
			}
		}
		for _, name := range running {
			if _, ok := since[name]; !ok {
				since[name] = now
			} else if now.Sub(since[name]) >= limit {
				os.Stderr.Write(buf)
				fmt.Fprintf(os.Stderr, "\nclustertest watchdog: %s has run for %v (limit %v); every goroutine's stack is above\n",
					name, now.Sub(since[name]).Round(time.Second), limit)
				os.Exit(2)
			}
		}
		buf = buf[:cap(buf)]
	}
}
