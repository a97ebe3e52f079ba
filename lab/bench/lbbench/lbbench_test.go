package lbbench

import (
	"context"
	"io"
	"math"
	"slices"
	"testing"
	"time"
)

func TestLBTraceIsSeededAndHitsTheLoad(t *testing.T) {
	for _, tc := range []struct {
		workload string
		load     float64
		capacity float64
	}{
		{"exp", 0.9, 16},
		{"exp", 0.5, 16},
		{"fine", 0.9, 16},
		{"exp", 0.9, 15.1}, // one replica 10× slow
	} {
		w, err := lbWorkload(tc.workload)
		if err != nil {
			t.Fatal(err)
		}
		const d = 200 * time.Second
		a := lbTrace(w, tc.load, tc.capacity, 1, 16, d, 7)
		b := lbTrace(w, tc.load, tc.capacity, 1, 16, d, 7)
		if !slices.Equal(a, b) {
			t.Fatalf("%s: same seed, different traces", tc.workload)
		}
		if c := lbTrace(w, tc.load, tc.capacity, 1, 16, d, 8); slices.Equal(a, c) {
			t.Fatalf("%s: different seeds, same trace", tc.workload)
		}
		var work time.Duration
		for _, r := range a {
			if r.Client < 0 || r.Client >= 16 || r.At >= d {
				t.Fatalf("%s: bad request %+v", tc.workload, r)
			}
			work += r.Service
		}
		// Offered work over the trace, in servers, is load × capacity.
		got := float64(work) / float64(d) / tc.capacity
		if math.Abs(got-tc.load)/tc.load > 0.05 {
			t.Errorf("%s at %g on %g servers: offered load %.3f", tc.workload, tc.load, tc.capacity, got)
		}
	}
}

func TestLBTraceScaleShrinksServiceAndInterarrival(t *testing.T) {
	w, _ := lbWorkload("exp")
	full := lbTrace(w, 0.9, 16, 1, 4, 10*time.Second, 3)
	half := lbTrace(w, 0.9, 16, 0.5, 4, 5*time.Second, 3)
	if len(full) != len(half) {
		t.Fatalf("scale 0.5 over half the time: %d requests, want %d", len(half), len(full))
	}
	for i := range full {
		ds, da := half[i].Service*2-full[i].Service, half[i].At*2-full[i].At
		if ds < -2 || ds > 2 || da < -time.Duration(2*(i+1)) || da > time.Duration(2*(i+1)) {
			t.Fatalf("request %d: %+v at scale 0.5, %+v at 1", i, half[i], full[i])
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Config){
		"workload": func(c *Config) { c.Workloads = []string{"medium"} },
		"load":     func(c *Config) { c.Loads = []float64{1.2} },
		"nodes":    func(c *Config) { c.Nodes = 1 },
		"warmup":   func(c *Config) { c.Duration, c.Warmup = 100*time.Millisecond, time.Second },
		"scale":    func(c *Config) { c.Scale = 0 },
		"section":  func(c *Config) { c.Sections = []string{"fig36"} },
	} {
		c := DefaultConfig()
		edit(&c)
		if err := Run(context.Background(), c, io.Discard); err == nil {
			t.Errorf("%s: bad config accepted", name)
		}
	}
}

// The goals section's extra row polls more replicas than the default:
// the cell must carry its ProbeSize to the client processes.
func TestMergeCellCarriesProbeSize(t *testing.T) {
	base := lbCell{PollSize: 3, Clients: 16}
	if got := mergeCell(base, lbCell{Label: "p", Policy: "prequal", ProbeSize: 10}, "exp", 0.9, time.Second); got.ProbeSize != 10 || got.PollSize != 3 {
		t.Errorf("merged %+v, want ProbeSize 10 and the base's PollSize", got)
	}
	if got := mergeCell(base, lbCell{Label: "d", Policy: "prequal"}, "exp", 0.9, time.Second); got.ProbeSize != 0 {
		t.Errorf("merged %+v, want the default's ProbeSize (0)", got)
	}
}
