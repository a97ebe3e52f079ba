// Package labcmd is the lab's command line: `neptune demo`, `neptune bench
// …` and `neptune sim …`, and the hidden verbs the benchmarks re-launch the
// binary with. lab/cmd/neptune passes Commands to cli.Execute, which adds them
// to the product's commands, so they follow the same conventions: GNU
// flags, help on stdout with exit 0, exit 2 for a bad command line.
//
// The commands only bind flags to the experiments' configurations; each
// experiment (lab/demo, lab/bench/…, lab/sim/…) validates and runs its own.
package labcmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/neptune-cluster/neptune/internal/cli"
)

// Commands returns the lab's command trees: demo, bench and sim.
func Commands() []*cobra.Command {
	return []*cobra.Command{demoCmd(), benchCmd(), simCmd()}
}

// config is what every experiment's configuration can do.
type config interface{ Validate() error }

// experiment is how every experiment command runs, its preamble in one
// place: the flags are turned into the configuration (prepare, if the
// command has flags that need converting), the configuration is checked (a
// bad value is a usage error, exit 2), the output directory out (if any) is
// made, and run runs with the command's context and standard output.
func experiment[C config](cfg *C, out *string, prepare func() error, run func(context.Context, C, io.Writer) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if prepare != nil {
			if err := prepare(); err != nil {
				return &cli.UsageError{Err: err}
			}
		}
		if err := (*cfg).Validate(); err != nil {
			return &cli.UsageError{Err: err}
		}
		if out != nil && *out != "" {
			if err := os.MkdirAll(*out, 0o755); err != nil {
				return err
			}
		}
		return run(cmd.Context(), *cfg, cmd.OutOrStdout())
	}
}

// group is a command that only holds subcommands.
func group(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long}
	cmd.AddCommand(subs...)
	return cmd
}

// leaf is a command that runs, takes flags and no arguments.
func leaf(use, short, long string, runE func(*cobra.Command, []string) error) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.NoArgs, RunE: runE}
	cmd.Flags().SortFlags = false
	return cmd
}

// The flags every experiment names the same way.

// addOut adds --out, the directory the experiment writes to.
func addOut(fs *pflag.FlagSet, dst *string, what string) {
	fs.StringVar(dst, "out", *dst, "`directory` for "+what)
}

// addSeed adds --seed.
func addSeed(fs *pflag.FlagSet, dst *uint64, what string) {
	fs.Uint64Var(dst, "seed", *dst, "seed of "+what)
}

// addSections adds --sections, the parts of the experiment to run, of
// all, comma-separated or repeated.
func addSections(fs *pflag.FlagSet, dst *[]string, all []string) {
	fs.Var(&choices{dst: dst, allowed: all}, "sections", "parts to run, of "+strings.Join(all, ","))
}

// choices is a list flag whose values must be among allowed; given on the
// command line, it replaces its default.
type choices struct {
	dst     *[]string
	allowed []string
	set     bool
}

func (c *choices) String() string { return strings.Join(*c.dst, ",") }

func (c *choices) Type() string { return "list" }

func (c *choices) Set(v string) error {
	if !c.set {
		*c.dst, c.set = nil, true
	}
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(c.allowed, s) {
			return fmt.Errorf("%q is none of %s", s, strings.Join(c.allowed, ", "))
		}
		*c.dst = append(*c.dst, s)
	}
	return nil
}

// numbers is a list flag of numbers, comma-separated or repeated; given on
// the command line, it replaces its default.
type numbers[T int | float64] struct {
	dst *[]T
	set bool
}

func (n *numbers[T]) String() string {
	s := make([]string, len(*n.dst))
	for i, x := range *n.dst {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

func (n *numbers[T]) Type() string { return "numbers" }

func (n *numbers[T]) Set(v string) error {
	if !n.set {
		*n.dst, n.set = nil, true
	}
	for _, s := range strings.Split(v, ",") {
		var x T
		var err error
		switch p := any(&x).(type) {
		case *int:
			*p, err = strconv.Atoi(strings.TrimSpace(s))
		case *float64:
			*p, err = strconv.ParseFloat(strings.TrimSpace(s), 64)
		}
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		*n.dst = append(*n.dst, x)
	}
	return nil
}

// ranges is a list of numbers written as ranges and single numbers, like
// --degrees 1-4 or 1,3.
type ranges struct {
	dst *[]int
	set bool
}

func (r *ranges) String() string {
	s := make([]string, len(*r.dst))
	for i, n := range *r.dst {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

func (r *ranges) Type() string { return "ranges" }

func (r *ranges) Set(v string) error {
	ns, err := cli.ParsePartitions(v)
	if err != nil {
		return err
	}
	if !r.set {
		*r.dst, r.set = nil, true
	}
	*r.dst = append(*r.dst, ns...)
	return nil
}
