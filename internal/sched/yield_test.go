package sched

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestYieldShapes(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name string
		y    Yield
		at   time.Duration
		want float64
	}{
		{"throughput before D", Throughput(4, 2*s), 1 * s, 4},
		{"throughput at D", Throughput(4, 2*s), 2 * s, 4},
		{"throughput after D", Throughput(4, 2*s), 2*s + 1, 0},
		{"resptime at 0", ResponseTime(2, 2*s), 0, 2},
		{"resptime halfway", ResponseTime(2, 2*s), 1 * s, 1},
		{"resptime at D", ResponseTime(2, 2*s), 2 * s, 0},
		{"hybrid before D'", Hybrid(4, s, 2, 2*s), s / 2, 4},
		{"hybrid at D'", Hybrid(4, s, 2, 2*s), s, 4},
		{"hybrid between", Hybrid(4, s, 2, 2*s), 3 * s / 2, 3},
		{"hybrid at D is the drop penalty", Hybrid(4, s, 2, 2*s), 2 * s, 2},
		{"hybrid after D", Hybrid(4, s, 2, 2*s), 3 * s, 0},
	}
	for _, tt := range tests {
		if got := tt.y.At(tt.at); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: At(%v) = %v, want %v", tt.name, tt.at, got, tt.want)
		}
	}
}

func TestYieldValidate(t *testing.T) {
	tests := []struct {
		y     Yield
		field string // empty: valid
	}{
		{Throughput(1, time.Second), ""},
		{ResponseTime(1, time.Second), ""},
		{Hybrid(4, time.Second, 2, 2*time.Second), ""},
		{Yield{Full: 0, Deadline: time.Second}, "Full"},
		{Yield{Full: math.Inf(1), Deadline: time.Second}, "Full"},
		{Yield{Full: math.NaN(), Deadline: time.Second}, "Full"},
		{Yield{Full: 1, Penalty: -1, Deadline: time.Second}, "Penalty"},
		{Yield{Full: 1, Penalty: 2, Deadline: time.Second}, "Penalty"},
		{Yield{Full: 1}, "Deadline"},
		{Yield{Full: 1, PreDeadline: -1, Deadline: time.Second}, "PreDeadline"},
		{Yield{Full: 1, PreDeadline: 2 * time.Second, Deadline: time.Second}, "PreDeadline"},
	}
	for _, tt := range tests {
		err := tt.y.Validate()
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tt.y, err)
		case tt.field != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.field+" ")):
			t.Errorf("%+v: error %v, want one naming %s", tt.y, err, tt.field)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := func() Config {
		return Config{Classes: []ClassConfig{
			{Name: "gold", Yield: Throughput(4, time.Second), Guarantee: 0.5},
			{Name: "bronze", Yield: Throughput(1, time.Second), Guarantee: 0.5},
		}}
	}
	tests := []struct {
		name  string
		mod   func(*Config)
		field string // substring the message must contain; empty: valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"no classes", func(c *Config) { c.Classes = nil }, "Classes is empty"},
		{"unnamed", func(c *Config) { c.Classes[1].Name = "" }, "Classes[1].Name"},
		{"duplicate", func(c *Config) { c.Classes[1].Name = "gold" }, "Classes[1].Name"},
		{"guarantee range", func(c *Config) { c.Classes[0].Guarantee = -0.1 }, "Classes[0].Guarantee"},
		{"guarantees over 1", func(c *Config) { c.Classes[0].Guarantee = 0.6 }, "Guarantee sum"},
		{"estimate", func(c *Config) { c.Classes[0].Estimate = -1 }, "Classes[0].Estimate"},
		{"yield", func(c *Config) { c.Classes[1].Yield.PreDeadline = 2 * time.Second }, "Classes[1].Yield (\"bronze\"): PreDeadline"},
		{"default", func(c *Config) { c.Default = "silver" }, "Default"},
		{"policy", func(c *Config) { c.Policy = 9 }, "Policy"},
		{"beta", func(c *Config) { c.Beta = 1 }, "Beta"},
		{"smoothing", func(c *Config) { c.Smoothing = 2 }, "Smoothing"},
		{"drop below", func(c *Config) { c.DropBelow = -0.5 }, "DropBelow"},
		{"window", func(c *Config) { c.OverloadWindow = -time.Second }, "OverloadWindow"},
		{"overload drops", func(c *Config) { c.OverloadDrops = 1.5 }, "OverloadDrops"},
	}
	for _, tt := range tests {
		c := ok()
		tt.mod(&c)
		err := c.Validate()
		if tt.field == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: error %v, want ErrInvalidConfig naming %q", tt.name, err, tt.field)
		}
		if _, nerr := NewClassScheduler(c); !errors.Is(nerr, ErrInvalidConfig) {
			t.Errorf("%s: NewClassScheduler error %v, want ErrInvalidConfig", tt.name, nerr)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	for _, p := range []Policy{Adaptive, EDF, YID, Greedy} {
		if got, err := ParsePolicy(p.String()); err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParsePolicy("fifo"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ParsePolicy(fifo) error = %v, want ErrInvalidConfig", err)
	}
}

func TestUsefulForIsTheLastResponseTimeAboveMin(t *testing.T) {
	ys := []Yield{
		Throughput(4, 2*time.Second),
		ResponseTime(2, 2*time.Second),
		Hybrid(4, time.Second, 2, 2*time.Second),
		Hybrid(4, time.Second, 0.01, 2*time.Second),
	}
	for _, y := range ys {
		for _, frac := range []float64{0, 0.01, 0.5} {
			min := frac * y.Full
			r := y.usefulFor(min)
			if y.At(r) <= min || y.At(r+time.Millisecond) > min {
				t.Errorf("%+v min %v: usefulFor = %v, yields %v there and %v 1ms later", y, min, r, y.At(r), y.At(r+time.Millisecond))
			}
		}
	}
}
