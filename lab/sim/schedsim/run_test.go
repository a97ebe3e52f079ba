package schedsim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunSchedWritesTablesAndFiles(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	o := DefaultSchedOptions()
	o.Out, o.Duration, o.Seeds, o.Step, o.Dispatch = dir, 20*time.Second, 1, 100, 2000
	if err := RunSched(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"micro-hybrid: LossPercent", "search-resptime: LossPercent", "goal Adaptive within", "per class (Fig 4.10)", "adaptive, 100 classes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, f := range []string{"sched_loss.csv", "sched_classes.csv", "sched_micro-hybrid.svg", "sched_search-hybrid.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
	// 4 workloads × 4 policies × 2 levels + header.
	if b, _ := os.ReadFile(filepath.Join(dir, "sched_loss.csv")); strings.Count(string(b), "\n") != 33 {
		t.Errorf("sched_loss.csv has %d lines, want 33", strings.Count(string(b), "\n"))
	}
}

func TestRunSchedBadOptionsAndCancel(t *testing.T) {
	var out bytes.Buffer
	o := DefaultSchedOptions()
	o.Workers = 0
	if err := RunSched(context.Background(), o, &out); err == nil {
		t.Error("workers 0 accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o = DefaultSchedOptions()
	o.Out, o.Duration = t.TempDir(), time.Second
	if err := RunSched(ctx, o, &out); err == nil {
		t.Error("cancelled context did not stop RunSched")
	}
	c := DefaultClassesOptions()
	c.Duration = 10 * time.Second
	if err := RunClasses(context.Background(), c, &out); err == nil {
		t.Error("classes: a duration under two partitioning intervals accepted")
	}
}
