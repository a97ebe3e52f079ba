package service

import (
	"context"
	"strings"
	"testing"
	"time"
)

func classService(mod func(*Service)) Service {
	s := Service{
		Name:    "svc",
		Methods: []Method{{Name: "m", Mode: Read, Handler: func(context.Context, *Request) (*Response, error) { return nil, nil }}},
		Classes: []Class{
			{Name: "gold", Yield: ThroughputYield(4, 2*time.Second), Guarantee: 0.5},
			{Name: "bronze", Yield: HybridYield(1, time.Second, 0.5, 2*time.Second)},
		},
	}
	if mod != nil {
		mod(&s)
	}
	return s
}

func TestServiceValidateNamesTheClassField(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Service)
		want string // "" means valid
	}{
		{"valid", nil, ""},
		{"no classes is FIFO", func(s *Service) { s.Classes = nil }, ""},
		{"policy without classes", func(s *Service) { s.Classes, s.Policy = nil, EDF }, "need Classes"},
		{"identity classes without classes", func(s *Service) { s.Classes, s.IdentityClasses = nil, map[string]string{"client/a": "gold"} }, "need Classes"},
		{"overload window without classes", func(s *Service) { s.Classes, s.OverloadWindow = nil, time.Second }, "OverloadWindow need Classes"},
		{"negative overload window", func(s *Service) { s.OverloadWindow = -time.Second }, "OverloadWindow"},
		{"identity class", func(s *Service) { s.IdentityClasses = map[string]string{"client/a": "gold"} }, ""},
		{"identity class unknown", func(s *Service) { s.IdentityClasses = map[string]string{"client/a": "silver"} }, `IdentityClasses["client/a"]: "silver"`},
		{"not an identity", func(s *Service) { s.IdentityClasses = map[string]string{"partner": "gold"} }, `"partner" is not an identity`},
		{"empty class name", func(s *Service) { s.Classes[1].Name = "" }, "Classes[1].Name is empty"},
		{"duplicate class", func(s *Service) { s.Classes[1].Name = "gold" }, "Classes[1].Name"},
		{"guarantee above 1", func(s *Service) { s.Classes[0].Guarantee = 1.5 }, "Classes[0].Guarantee"},
		{"guarantees sum above 1", func(s *Service) { s.Classes[1].Guarantee = 0.6 }, "Guarantee sum"},
		{"rising yield", func(s *Service) { s.Classes[1].Yield.Penalty = 2 }, `Classes[1].Yield ("bronze"): Penalty 2 exceeds Full 1`},
		{"zero deadline", func(s *Service) { s.Classes[0].Yield = ThroughputYield(1, 0) }, "Classes[0].Yield"},
		{"unknown default", func(s *Service) { s.DefaultClass = "silver" }, "DefaultClass"},
		{"bad policy", func(s *Service) { s.Policy = 9 }, "Policy"},
		{"bad accounting", func(s *Service) { s.Accounting = 7 }, "Accounting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := classService(tt.mod)
			err := s.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("accepted, want an error naming %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q does not name %q", err, tt.want)
			}
		})
	}
}

func TestParsePolicyAndAccountingRoundTrip(t *testing.T) {
	for _, p := range []SchedPolicy{Adaptive, EDF, YID, Greedy} {
		if got, err := ParseSchedPolicy(strings.ToUpper(p.String())); err != nil || got != p {
			t.Fatalf("ParseSchedPolicy(%q) = %v, %v", p, got, err)
		}
	}
	for _, a := range []Accounting{WallTime, ThreadCPU, Reported} {
		if got, err := ParseAccounting(a.String()); err != nil || got != a {
			t.Fatalf("ParseAccounting(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := ParseAccounting("tokens"); err == nil {
		t.Fatal("ParseAccounting accepted tokens")
	}
}

func TestYieldShapes(t *testing.T) {
	h := HybridYield(4, time.Second, 2, 2*time.Second)
	for _, c := range []struct {
		r    time.Duration
		want float64
	}{{0, 4}, {time.Second, 4}, {1500 * time.Millisecond, 3}, {2 * time.Second, 2}, {2*time.Second + 1, 0}} {
		if got := h.At(c.r); got != c.want {
			t.Errorf("hybrid At(%v) = %v, want %v", c.r, got, c.want)
		}
	}
	if got := ResponseTimeYield(2, 2*time.Second).At(time.Second); got != 1 {
		t.Errorf("response-time At(D/2) = %v, want 1", got)
	}
	if got := ThroughputYield(2, time.Second).At(time.Second); got != 2 {
		t.Errorf("throughput At(D) = %v, want 2", got)
	}
}
