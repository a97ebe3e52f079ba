package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Main runs `neptune sim lb`: it reproduces dissertation Figs 3.1–3.3 and
// checks issue 3's goals, printing tables and writing CSV and SVG files to
// -out.
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sim lb", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		fig       = fs.String("fig", "all", "what to run: 3.1, 3.2, 3.3, goals or all")
		workloads = fs.String("workload", "exp,fine,medium", "comma-separated workloads: exp, fine, medium, det, hv (goals always add det and hv)")
		loads     = fs.String("load", "0.5,0.9", "comma-separated loads for the figures (goals run at 0.9)")
		servers   = fs.Int("servers", 16, "servers")
		clients   = fs.Int("clients", 16, "independent clients, each with its own policy instance")
		seed      = fs.Uint64("seed", 1, "seed of the arrival trace and of the policies")
		requests  = fs.Int("requests", 100_000, "measured requests per run (a tenth more warm up)")
		duration  = fs.Duration("duration", 0, "if set, simulated time per run instead of -requests (at the Poisson/Exp rate at 90% load)")
		out       = fs.String("out", "out", "directory for CSV and SVG files")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: neptune sim lb [flags]\n\nSimulates the load-balancing policies of dissertation ch. 3 and issue 3.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("sim: %w", err)
	}
	o := Options{Servers: *servers, Clients: *clients, Requests: *requests, Seed: *seed, Out: *out}
	if *duration > 0 {
		rate := 0.9 * float64(*servers) / PoissonExp.Service.Mean.Seconds()
		o.Requests = int(duration.Seconds() * rate)
	}
	if o.Servers < 1 || o.Clients < 1 || o.Requests < 10 {
		return fmt.Errorf("sim: -servers and -clients must be >= 1 and -requests >= 10, got %d, %d, %d", o.Servers, o.Clients, o.Requests)
	}
	for _, name := range strings.Split(*workloads, ",") {
		w, err := WorkloadByName(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		o.Workloads = append(o.Workloads, w)
	}
	for _, s := range strings.Split(*loads, ",") {
		l, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || l <= 0 || l >= 1 {
			return fmt.Errorf("sim: -load wants loads in (0, 1), got %q", s)
		}
		o.Loads = append(o.Loads, l)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	steps := map[string]func(context.Context, Options, io.Writer) error{"3.1": fig31, "3.2": fig32, "3.3": fig33, "goals": goalsAll}
	order := []string{"3.1", "3.2", "3.3", "goals"}
	if *fig != "all" {
		if steps[*fig] == nil {
			return fmt.Errorf("sim: -fig wants 3.1, 3.2, 3.3, goals or all, got %q", *fig)
		}
		order = []string{*fig}
	}
	for _, f := range order {
		start := time.Now()
		if err := steps[f](ctx, o, stdout); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "(%s took %v)\n\n", f, time.Since(start).Round(time.Second))
	}
	fmt.Fprintf(stdout, "wrote CSV and SVG files to %s\n", o.Out)
	return nil
}

// goalsAll runs the goals on the chosen workloads plus the deterministic and
// high-variance service times the issue asks to report.
func goalsAll(ctx context.Context, o Options, stdout io.Writer) error {
	for _, w := range []Workload{Deterministic, HighVariance} {
		if !containsWorkload(o.Workloads, w.Name) {
			o.Workloads = append(o.Workloads, w)
		}
	}
	return goals(ctx, o, stdout)
}

func containsWorkload(ws []Workload, name string) bool {
	for _, w := range ws {
		if w.Name == name {
			return true
		}
	}
	return false
}
