package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// spin runs a shell loop for d: as a child of this process, or (orphan)
// in a grandchild whose parent exits at once, so it leaves this process
// tree the way another program's work would. It returns the CPU the
// child and what it waited for used (0 for an orphan): on a busy machine
// a loop of d gets much less than d of it.
func spin(t *testing.T, d time.Duration, orphan bool) time.Duration {
	t.Helper()
	loop := fmt.Sprintf("timeout %.3f sh -c 'while :; do :; done'", d.Seconds())
	if orphan {
		loop = "(" + loop + ") >/dev/null 2>&1 & exit 0"
	}
	// timeout exits 124 when it stops the loop, as it should.
	cmd := exec.Command("sh", "-c", loop)
	if err := cmd.Run(); err != nil && !orphan {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 124 {
			t.Fatal(err)
		}
	}
	if orphan {
		return 0
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// TestOtherWorkIsWorkOutsideTheTree: a CPU-bound child is the
// benchmark's own work; the same loop in a process outside the tree is
// other work.
func TestOtherWorkIsWorkOutsideTheTree(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat")
	}
	const d = 800 * time.Millisecond
	// The tree's CPU across a spin, in seconds: what other programs on
	// the machine do (other test binaries, say) changes only /proc/stat.
	var used time.Duration // the child's CPU in the last spin
	treeAcross := func(orphan bool) float64 {
		a := sampleCPU()
		if !a.ok {
			t.Fatal("cannot sample the CPU")
		}
		used = spin(t, d, orphan)
		if orphan {
			time.Sleep(d + 200*time.Millisecond) // the orphan runs on after sh exits
		}
		b := sampleCPU()
		if !b.ok {
			t.Fatal("cannot sample the CPU")
		}
		return float64(b.tree-a.tree) / clockTicks
	}
	// The child's loop (up to a core for d, less on a busy machine) is
	// the tree's own work.
	if own := treeAcross(false); own < 0.8*used.Seconds()-0.02 || used < 10*time.Millisecond {
		t.Errorf("a child's %v loop used %v of CPU and added %.2f s to the tree", d, used, own)
	}
	// The orphan's loop runs outside it: other work.
	if own := treeAcross(true); own > 0.3*d.Seconds() {
		t.Errorf("an orphan's %v loop added %.2f s of CPU to the tree", d, own)
	}
	// otherCores counts what the tree did not use, and steal.
	a := cpuSample{busy: 1000, steal: 10, tree: 500, ok: true}
	b := cpuSample{busy: 1300, steal: 30, tree: 700, ok: true}
	if got := otherCores(a, b, time.Second); got != 1.2 {
		t.Errorf("otherCores = %v, want (300-200+20)/100 = 1.2", got)
	}
}

func TestReadProcParsesThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	p, ok := readProc(os.Getpid())
	if !ok || p.ppid != os.Getppid() {
		t.Fatalf("readProc(self) = %+v, %v; want ppid %d", p, ok, os.Getppid())
	}
	if _, ok := treeTicks(os.Getpid()); !ok {
		t.Fatal("treeTicks(self) failed")
	}
}

func TestTreeCPUCountsOwnWork(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before, ok := TreeCPU()
	if !ok {
		t.Fatal("TreeCPU failed")
	}
	// Spin until the process has used 100 ms of CPU by its own clock.
	var x uint64
	for start := time.Now(); time.Since(start) < 2*time.Second; {
		for i := range 1_000_000 {
			x += uint64(i)
		}
		if after, _ := TreeCPU(); after-before >= 100*time.Millisecond {
			return
		}
	}
	after, _ := TreeCPU()
	t.Fatalf("TreeCPU grew %v in 2 s of spinning (x=%d), want >= 100ms", after-before, x)
}
