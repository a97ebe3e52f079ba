package cpuquota

import (
	"errors"
	"os"
	"os/exec"
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

// TestQuotaHolds confines a busy process to 0.2 of a core and measures
// it: it stays within the quota, and an unconfined one judged against the
// same quota is caught above it (the check can fail).
func TestQuotaHolds(t *testing.T) {
	root, err := Open("neptune-cpuquota-test")
	if errors.Is(err, ErrUnavailable) && os.Getenv("CI") == "" {
		t.Skipf("%v (needs root and a cgroup cpu controller)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := root.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	g, err := root.Group("spinner", 0.2)
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
