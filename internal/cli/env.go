package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/gateway"
)

// EnvPrefix starts the environment variable of every flag: --tls-dir is
// NEPTUNE_TLS_DIR. A flag on the command line wins over its variable, and
// the variable over the config file's key (what StatefulSets and Compose
// files set). A list flag's variable takes commas, a repeatable one's
// spaces (NEPTUNE_SERVICE="kv:0-3,7 echo:0").
const EnvPrefix = "NEPTUNE_"

// EnvName is the environment variable of the flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// noEnv are flags no variable sets.
var noEnv = map[string]bool{"help": true}

// documentEnv appends each flag's variable to its help line, once.
func documentEnv(c *cobra.Command, done map[*pflag.Flag]bool) {
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if noEnv[f.Name] || done[f] {
			return
		}
		done[f] = true
		f.Usage += " [$" + EnvName(f.Name) + "]"
	})
}

// applyEnv sets every flag of cmd not given on the command line from its
// environment variable, if set; a bad value is a usage error naming both.
func applyEnv(cmd *cobra.Command) error {
	return applyEnvFrom(cmd.Flags(), os.LookupEnv)
}

// applyEnvFrom is applyEnv with the variables read by lookup.
func applyEnvFrom(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || noEnv[f.Name] {
			return
		}
		v, ok := lookup(EnvName(f.Name))
		if !ok {
			return
		}
		values := []string{v}
		if f.Value.Type() == "stringArray" {
			// A repeatable flag's values may hold commas (kv:0-3,7):
			// the variable separates them by spaces.
			values = strings.Fields(v)
		}
		for _, one := range values {
			if e := fs.Set(f.Name, one); e != nil {
				err = Usagef("$%s (for --%s) %q: %w", EnvName(f.Name), f.Name, v, e)
				return
			}
		}
	})
	return err
}

// withEnv runs applyEnv before pre (a command's PreRunE, or nil).
func withEnv(pre func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := applyEnv(cmd); err != nil {
			return err
		}
		if pre != nil {
			return pre(cmd, args)
		}
		return nil
	}
}

// FlagEnvNames lists the environment variables of the flags of the
// command at path below the root (FlagEnvNames("node"), ("tls", "cert",
// "create")), in the order the help shows them; nil if there is no such
// command. Deployment manifests are checked against it, so a variable
// they set is one the binary reads.
func FlagEnvNames(path ...string) []string {
	cmd := newRoot()
	for _, name := range path {
		i := slices.IndexFunc(cmd.Commands(), func(c *cobra.Command) bool { return c.Name() == name })
		if i < 0 {
			return nil
		}
		cmd = cmd.Commands()[i]
	}
	var names []string
	visit := func(f *pflag.Flag) {
		if !noEnv[f.Name] {
			names = append(names, EnvName(f.Name))
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	return slices.Compact(names)
}

// parseFor parses args into fs, then sets the flags not given from env.
func parseFor(fs *pflag.FlagSet, args []string, env map[string]string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return applyEnvFrom(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

// NodeConfigFor is the validated config `neptune node args...` would run
// with in the environment env (only its NEPTUNE_* variables count): the
// --config file, then the variables, then the flags. It starts nothing;
// deployment manifests are checked with it.
func NodeConfigFor(args []string, env map[string]string) (FileConfig, error) {
	var o nodeOptions
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	o.addFlags(fs)
	if err := parseFor(fs, args, env); err != nil {
		return FileConfig{}, err
	}
	return o.fileConfig(fs)
}

// GatewayConfig is what `neptune gateway` runs with besides its config
// file's keys: the flags that are not keys.
type GatewayConfig struct {
	Host, Advertise, LogLevel string
	// Security is the gateway's client security (its --cert included).
	Security neptune.Security
}

// GatewayConfigFor is NodeConfigFor for `neptune gateway args...`: the
// validated config file with the variables and flags applied, and the
// settings that are only flags.
func GatewayConfigFor(args []string, env map[string]string) (gateway.Config, GatewayConfig, error) {
	var o gatewayOptions
	fs := pflag.NewFlagSet("gateway", pflag.ContinueOnError)
	o.addFlags(fs)
	if err := parseFor(fs, args, env); err != nil {
		return gateway.Config{}, GatewayConfig{}, err
	}
	if o.config == "" {
		return gateway.Config{}, GatewayConfig{}, Usagef("--config is required")
	}
	cfg, err := o.fileConfig(fs)
	if err != nil {
		return cfg, GatewayConfig{}, err
	}
	if _, err := logger(o.logLevel, o.logFormat); err != nil {
		return cfg, GatewayConfig{}, err
	}
	if err := o.tracing(fs).Validate(); err != nil {
		return cfg, GatewayConfig{}, err
	}
	sec, err := o.sec.client()
	return cfg, GatewayConfig{Host: o.host, Advertise: o.advertise, LogLevel: o.logLevel, Security: sec}, err
}
