package cpuquota

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	const w = time.Second
	for _, tc := range []struct {
		name          string
		idle          time.Duration
		used          time.Duration
		over, starved bool
	}{
		{"within its quota", time.Second, 200 * time.Millisecond, false, false},
		{"within the tolerance", time.Second, 209 * time.Millisecond, false, false},
		{"within the tolerance and /proc's resolution", time.Second, 229 * time.Millisecond, false, false},
		{"beyond both", time.Second, 231 * time.Millisecond, true, false},
		{"above its quota", time.Second, 300 * time.Millisecond, true, false},
		{"on a saturated machine", 50 * time.Millisecond, 100 * time.Millisecond, false, true},
	} {
		j := Judge(w, 2, tc.idle, []Usage{{Name: "n1", Cores: 0.2, Used: tc.used}})
		if (len(j.Over) > 0) != tc.over || j.Starved != tc.starved || j.OK() != (!tc.over && !tc.starved) {
			t.Errorf("%s: %+v", tc.name, j)
		}
		if !j.OK() && j.Reason == "" {
			t.Errorf("%s: no reason given", tc.name)
		}
	}
	if err := Fits([]float64{0.5, 0.5}, 0.5); err != nil {
		t.Errorf("1.5 cores refused: %v", err)
	}
	if err := Fits(make([]float64, 64), 0); err != nil {
		t.Errorf("zero quotas refused: %v", err)
	}
	if err := Fits([]float64{1, 1, 1}, 0); err == nil {
		t.Error("3 cores of quota accepted on a 2-core machine")
	}
}

// spin burns CPU in a child process for at most d.
func spin(t *testing.T, d time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSpinHelper$")
	cmd.Env = append(os.Environ(), "CPUQUOTA_SPIN="+d.String())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func TestSpinHelper(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("CPUQUOTA_SPIN"))
	if err != nil {
		t.Skip("a child of TestQuotaHolds")
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// openRoot opens a parent group for one test, closed when it ends; it
// skips without root or a cpu controller, except under CI.
func openRoot(t *testing.T, name string) *Root {
	t.Helper()
	root, err := Open(name)
	if errors.Is(err, ErrUnavailable) && os.Getenv("CI") == "" {
		t.Skipf("%v (needs root and a cgroup cpu controller)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := root.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return root
}

// TestQuotaHolds confines a busy process to 0.2 of a core and measures
// it: it stays within the quota, and an unconfined one judged against the
// same quota is caught above it (the check can fail).
func TestQuotaHolds(t *testing.T) {
	root := openRoot(t, "neptune-cpuquota-test")
	g, err := root.Group("spinner", 0.2, 0)
	if err != nil {
		t.Fatal(err)
	}
	confined, free := spin(t, 5*time.Second), spin(t, 5*time.Second)
	if err := g.Add(confined.Process.Pid); err != nil {
		t.Fatal(err)
	}
	var m Meter
	m.Watch("confined", confined.Process.Pid, 0.2)
	m.Watch("free", free.Process.Pid, 0.2)
	time.Sleep(200 * time.Millisecond) // the first period under the quota
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	j, us, err := m.Stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("used in 1.5 s: confined %v, free %v; %s", us[0].Used, us[1].Used, j.Reason)
	if len(j.Over) != 1 || j.Over[0] != "free" {
		if j.Starved {
			// The free process had no CPU to exceed a quota with: the
			// window cannot be judged, which is what Starved says.
			t.Skipf("over quota: %v on a starved machine (%s): not judged", j.Over, j.Reason)
		}
		t.Errorf("over quota: %v, want only the unconfined process", j.Over)
	}
	if !j.Starved && us[0].Used < 150*time.Millisecond {
		t.Errorf("the confined process used %v in 1.5 s on a machine with room: its quota is 300 ms", us[0].Used)
	}
}

func TestFillHelper(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("CPUQUOTA_FILL"))
	if err != nil {
		t.Skip("a child of TestMemoryLimitBoundsTheCache")
	}
	if _, err := os.Stdin.Read(make([]byte, 1)); err != nil { // in its group
		t.Fatal(err)
	}
	f, err := os.CreateTemp("", "neptune-cpuquota-fill-*")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(f.Name())
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i) | 1
	}
	for range n {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	os.Stdout.WriteString("filled\n")
	time.Sleep(time.Minute)
}

// TestMemoryLimitBoundsTheCache confines a process writing a 64 MB file
// to 32 MB of memory: the group's usage, page cache included, stays
// within the limit (unconfined, the file's pages would all stay cached).
func TestMemoryLimitBoundsTheCache(t *testing.T) {
	root := openRoot(t, "neptune-cpuquota-memtest")
	const limit = 32 << 20
	g, err := root.Group("filler", 1, limit)
	if errors.Is(err, ErrNoMemory) && os.Getenv("CI") == "" {
		t.Skipf("%v (needs a cgroup memory controller)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Group("bad", 1, -1); err == nil {
		t.Error("a negative memory limit accepted")
	}
	usage := filepath.Join(g.dirs[len(g.dirs)-1], "memory.usage_in_bytes")
	if root.v2 {
		usage = filepath.Join(g.dirs[0], "memory.current")
	}
	// The child fills its file once in the group, told so on its stdin:
	// every page of it is charged to the group.
	cmd := exec.Command(os.Args[0], "-test.run=^TestFillHelper$")
	cmd.Env = append(os.Environ(), "CPUQUOTA_FILL=64")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := out.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "filled") {
		t.Fatalf("the child did not fill its file: %q, %v", buf[:n], err)
	}
	b, err := os.ReadFile(usage)
	if err != nil {
		t.Fatal(err)
	}
	used, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the group uses %d MB after writing 64 MB", used>>20)
	if used <= 0 || used > limit {
		t.Errorf("the group uses %d bytes, want within (0, %d]", used, limit)
	}
}
