package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune"
)

// ClassConfig is one service class in the node config file, e.g.
//
//	classes:
//	  - {name: gold, yield: throughput, value: 4, deadline: 2s, guarantee: 0.2}
//	  - {name: bronze, yield: hybrid, value: 1, pre_deadline: 1s, penalty: 0.5, deadline: 2s}
type ClassConfig struct {
	Name string `yaml:"name"`
	// Yield is the yield function's shape: throughput (Value until
	// Deadline), response_time (linear from Value to 0 at Deadline) or
	// hybrid (Value until PreDeadline, linear to Penalty at Deadline).
	Yield       string   `yaml:"yield"`
	Value       float64  `yaml:"value"`
	Deadline    Duration `yaml:"deadline"`
	PreDeadline Duration `yaml:"pre_deadline"`
	Penalty     float64  `yaml:"penalty"`
	Guarantee   float64  `yaml:"guarantee"`
	Estimate    Duration `yaml:"estimate"`
}

// yield builds the class's yield function, naming the YAML key on error.
func (c ClassConfig) yield(where string) (neptune.Yield, error) {
	d, pre := time.Duration(c.Deadline), time.Duration(c.PreDeadline)
	switch {
	case !(c.Value > 0):
		return neptune.Yield{}, fmt.Errorf("%s.value must be > 0, got %v", where, c.Value)
	case d <= 0:
		return neptune.Yield{}, fmt.Errorf("%s.deadline must be > 0, got %v", where, d)
	}
	if c.Yield != "hybrid" && (c.PreDeadline != 0 || c.Penalty != 0) {
		return neptune.Yield{}, fmt.Errorf("%s: pre_deadline and penalty apply to yield: hybrid only", where)
	}
	switch c.Yield {
	case "throughput":
		return neptune.ThroughputYield(c.Value, d), nil
	case "response_time":
		return neptune.ResponseTimeYield(c.Value, d), nil
	case "hybrid":
		switch {
		case pre < 0 || pre > d:
			return neptune.Yield{}, fmt.Errorf("%s.pre_deadline must be in 0..deadline (%v), got %v", where, d, pre)
		case c.Penalty < 0 || c.Penalty > c.Value:
			return neptune.Yield{}, fmt.Errorf("%s.penalty must be in 0..value (%v) so yield never rises, got %v", where, c.Value, c.Penalty)
		}
		return neptune.HybridYield(c.Value, pre, c.Penalty, d), nil
	}
	return neptune.Yield{}, fmt.Errorf("%s.yield: unknown shape %q (throughput, response_time or hybrid)", where, c.Yield)
}

// validateClasses checks the class keys of services[i]; where is
// "config: services[i]".
func (s ServiceConfig) validateClasses(where string) error {
	var svc neptune.Service
	return s.toClasses(where, &svc)
}

// applyClasses sets svc's classes, policy and accounting from s.
func (s ServiceConfig) applyClasses(svc *neptune.Service) error {
	return s.toClasses("config: services["+s.Name+"]", svc)
}

func (s ServiceConfig) toClasses(where string, svc *neptune.Service) error {
	if s.Accounting != "" {
		a, err := neptune.ParseAccounting(s.Accounting)
		if err != nil {
			return fmt.Errorf("%s.accounting: %q is not wall, cpu or reported", where, s.Accounting)
		}
		svc.Accounting = a
	}
	if len(s.Classes) == 0 {
		if s.Policy != "" || s.DefaultClass != "" || len(s.IdentityClasses) > 0 || s.OverloadWindow != 0 {
			return fmt.Errorf("%s: policy, default_class, identity_classes and overload_window need classes", where)
		}
		return nil
	}
	if s.Policy != "" {
		p, err := neptune.ParseSchedPolicy(s.Policy)
		if err != nil {
			return fmt.Errorf("%s.policy: %q is not adaptive, edf, yid or greedy", where, s.Policy)
		}
		svc.Policy = p
	}
	if s.OverloadWindow < 0 {
		return fmt.Errorf("%s.overload_window must be >= 0, got %v", where, time.Duration(s.OverloadWindow))
	}
	svc.OverloadWindow = time.Duration(s.OverloadWindow)
	seen := map[string]bool{}
	sum := 0.0
	svc.Classes = nil
	for j, c := range s.Classes {
		cw := fmt.Sprintf("%s.classes[%d]", where, j)
		switch {
		case c.Name == "":
			return fmt.Errorf("%s.name is required", cw)
		case seen[c.Name]:
			return fmt.Errorf("%s.name: class %q is listed twice", cw, c.Name)
		case !(c.Guarantee >= 0 && c.Guarantee <= 1):
			return fmt.Errorf("%s.guarantee must be in 0..1, got %v", cw, c.Guarantee)
		case c.Estimate < 0:
			return fmt.Errorf("%s.estimate must be >= 0, got %v", cw, time.Duration(c.Estimate))
		}
		y, err := c.yield(cw)
		if err != nil {
			return err
		}
		seen[c.Name] = true
		sum += c.Guarantee
		svc.Classes = append(svc.Classes, neptune.Class{Name: c.Name, Yield: y, Guarantee: c.Guarantee, Estimate: time.Duration(c.Estimate)})
	}
	switch {
	case sum > 1+1e-9:
		return fmt.Errorf("%s.classes: guarantees sum to %v, want at most 1", where, sum)
	case s.DefaultClass != "" && !seen[s.DefaultClass]:
		return fmt.Errorf("%s.default_class: %q is none of the classes", where, s.DefaultClass)
	}
	for id, class := range s.IdentityClasses {
		if role, name, ok := strings.Cut(id, "/"); !ok || role == "" || name == "" {
			return fmt.Errorf("%s.identity_classes: %q is not a certificate identity (role/name, e.g. client/partner)", where, id)
		}
		if !seen[class] {
			return fmt.Errorf("%s.identity_classes[%s]: %q is none of the classes", where, id, class)
		}
	}
	svc.DefaultClass, svc.IdentityClasses = s.DefaultClass, s.IdentityClasses
	return nil
}
