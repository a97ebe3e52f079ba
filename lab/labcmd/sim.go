package cli

import (
	"context"
	"io"
	"slices"
	"strings"

	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/internal/sim"
)

// simulations are the discrete-event experiments; each drives the same
// policy code the nodes run.
var simulations = map[string]func(context.Context, []string, io.Writer) error{
	"lb":      sim.Main,          // load balancing, dissertation ch. 3
	"sched":   sched.Main,        // class scheduling, dissertation ch. 4
	"classes": sched.ClusterMain, // class-aware balancing vs partitioning, §4.5.3-4.5.4
	"dac":     dac.Main,          // data aggregation trees, PPoPP'03
}

func simNames() string {
	names := make([]string, 0, len(simulations))
	for n := range simulations {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func runSim(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || simulations[args[0]] == nil {
		return usagef("sim needs one of: %s (e.g. neptune sim lb -h)", simNames())
	}
	return simulations[args[0]](ctx, args[1:], stdout)
}
