package cli

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || noEnv[f.Name] {
			return
		}
		v, ok := os.LookupEnv(EnvName(f.Name))
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
			if e := cmd.Flags().Set(f.Name, one); e != nil {
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
