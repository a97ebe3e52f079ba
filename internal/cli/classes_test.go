package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
)

const classBase = "id: n1\nservices:\n  - name: work\n    partitions: [0]\n"

func TestParseConfigClasses(t *testing.T) {
	y := classBase + `    policy: greedy
    overload_window: 3s
    accounting: cpu
    default_class: bronze
    identity_classes: {client/partner: gold}
    classes:
      - {name: gold, yield: throughput, value: 4, deadline: 2s, guarantee: 0.2}
      - {name: silver, yield: response_time, value: 2, deadline: 2s}
      - {name: bronze, yield: hybrid, value: 1, pre_deadline: 1s, penalty: 0.5, deadline: 2s, estimate: 20ms}
`
	c, err := ParseConfig([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	svc := builtins["work"]()
	if err := c.Services[0].applyClasses(&svc); err != nil {
		t.Fatal(err)
	}
	if err := svc.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []neptune.Class{
		{Name: "gold", Yield: neptune.ThroughputYield(4, 2*time.Second), Guarantee: 0.2},
		{Name: "silver", Yield: neptune.ResponseTimeYield(2, 2*time.Second)},
		{Name: "bronze", Yield: neptune.HybridYield(1, time.Second, 0.5, 2*time.Second), Estimate: 20 * time.Millisecond},
	}
	for i, k := range want {
		if svc.Classes[i] != k {
			t.Errorf("classes[%d] = %+v, want %+v", i, svc.Classes[i], k)
		}
	}
	if svc.Policy != neptune.Greedy || svc.Accounting != neptune.ThreadCPU || svc.DefaultClass != "bronze" || svc.IdentityClasses["client/partner"] != "gold" || svc.OverloadWindow != 3*time.Second {
		t.Errorf("policy %v, accounting %v, default %q, identity classes %v, overload window %v", svc.Policy, svc.Accounting, svc.DefaultClass, svc.IdentityClasses, svc.OverloadWindow)
	}
}

func TestParseConfigClassErrorsNameTheField(t *testing.T) {
	cls := func(s string) string { return classBase + "    classes:\n      - " + s + "\n" }
	tests := []struct{ name, yaml, want string }{
		{"unknown class key", cls("{name: g, yield: throughput, value: 1, deadline: 1s, colour: red}"), "colour"},
		{"no name", cls("{yield: throughput, value: 1, deadline: 1s}"), "services[0].classes[0].name"},
		{"unknown shape", cls("{name: g, yield: step, value: 1, deadline: 1s}"), "services[0].classes[0].yield"},
		{"no value", cls("{name: g, yield: throughput, deadline: 1s}"), "classes[0].value"},
		{"no deadline", cls("{name: g, yield: throughput, value: 1}"), "classes[0].deadline"},
		{"pre_deadline past deadline", cls("{name: g, yield: hybrid, value: 1, pre_deadline: 3s, deadline: 1s}"), "classes[0].pre_deadline"},
		{"rising yield", cls("{name: g, yield: hybrid, value: 1, penalty: 2, deadline: 1s}"), "classes[0].penalty"},
		{"penalty on throughput", cls("{name: g, yield: throughput, value: 1, penalty: 1, deadline: 1s}"), "hybrid only"},
		{"bad guarantee", cls("{name: g, yield: throughput, value: 1, deadline: 1s, guarantee: 2}"), "classes[0].guarantee"},
		{"guarantees above 1", cls("{name: g, yield: throughput, value: 1, deadline: 1s, guarantee: 0.7}") +
			"      - {name: b, yield: throughput, value: 1, deadline: 1s, guarantee: 0.7}\n", "services[0].classes: guarantees sum"},
		{"duplicate class", cls("{name: g, yield: throughput, value: 1, deadline: 1s}") +
			"      - {name: g, yield: throughput, value: 1, deadline: 1s}\n", "classes[1].name"},
		{"unknown policy", cls("{name: g, yield: throughput, value: 1, deadline: 1s}") + "    policy: lottery\n", "services[0].policy"},
		{"unknown default", cls("{name: g, yield: throughput, value: 1, deadline: 1s}") + "    default_class: x\n", "services[0].default_class"},
		{"policy without classes", classBase + "    policy: edf\n", "need classes"},
		{"overload_window without classes", classBase + "    overload_window: 3s\n", "need classes"},
		{"negative overload_window", cls("{name: g, yield: throughput, value: 1, deadline: 1s}") + "    overload_window: -1s\n", "services[0].overload_window"},
		{"identity class unknown", cls("{name: g, yield: throughput, value: 1, deadline: 1s}") + "    identity_classes: {client/a: x}\n", "services[0].identity_classes[client/a]"},
		{"identity not role/name", cls("{name: g, yield: throughput, value: 1, deadline: 1s}") + "    identity_classes: {a: g}\n", `identity_classes: "a"`},
		{"unknown accounting", classBase + "    accounting: tokens\n", "services[0].accounting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.yaml)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}
