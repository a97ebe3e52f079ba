package sched

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMainWritesTablesAndFiles(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := Main(context.Background(), []string{"-out", dir, "-duration", "20s", "-seeds", "1", "-step", "100", "-dispatch", "2000"}, &out)
	if err != nil {
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

func TestMainHelpAndBadFlags(t *testing.T) {
	var out bytes.Buffer
	if err := Main(context.Background(), []string{"-h"}, &out); err != nil || !strings.Contains(out.String(), "usage: neptune sim sched") {
		t.Errorf("-h: err %v, output %q", err, out.String())
	}
	if err := Main(context.Background(), []string{"-workers", "0"}, &out); err == nil {
		t.Error("-workers 0 accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Main(ctx, []string{"-out", t.TempDir(), "-duration", time.Second.String()}, &out); err == nil {
		t.Error("cancelled context did not stop Main")
	}
}
