package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestFlagsFromEnvironment: every flag takes its NEPTUNE_* variable
// unless given on the command line; lists take commas, repeatable flags
// spaces; a bad value is a usage error naming the variable.
func TestFlagsFromEnvironment(t *testing.T) {
	var id, host string
	var port int
	var join, services []string
	newProbe := func() *cobra.Command {
		probe := &cobra.Command{Use: "probe", RunE: func(*cobra.Command, []string) error { return nil }}
		probe.Flags().StringVar(&id, "id", "", "")
		probe.Flags().StringVar(&host, "advertise-host", "", "")
		probe.Flags().IntVar(&port, "rpc-port", 0, "")
		probe.Flags().StringSliceVar(&join, "join", nil, "")
		probe.Flags().StringArrayVar(&services, "service", nil, "")
		return probe
	}
	t.Setenv("NEPTUNE_ID", "from-env")
	t.Setenv("NEPTUNE_ADVERTISE_HOST", "n1.example")
	t.Setenv("NEPTUNE_RPC_PORT", "7001")
	t.Setenv("NEPTUNE_JOIN", "a:7946,b:7946")
	t.Setenv("NEPTUNE_SERVICE", "kv:0-3,7 echo:0")
	if code, _, stderr := run(t, []string{"probe", "--id", "from-flag"}, newProbe()); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if id != "from-flag" || host != "n1.example" || port != 7001 || strings.Join(join, " ") != "a:7946 b:7946" ||
		strings.Join(services, " ") != "kv:0-3,7 echo:0" {
		t.Fatalf("id %q host %q port %d join %v services %v", id, host, port, join, services)
	}
	t.Setenv("NEPTUNE_RPC_PORT", "seven")
	code, _, stderr := run(t, []string{"probe"}, newProbe())
	if code != ExitUsage || !strings.Contains(stderr, "$NEPTUNE_RPC_PORT (for --rpc-port)") {
		t.Fatalf("bad variable: exit %d, %s", code, stderr)
	}
}

// TestEveryFlagDocumentsItsVariable: each product command's help names
// the variable of each of its flags.
func TestEveryFlagDocumentsItsVariable(t *testing.T) {
	for _, path := range [][]string{{"node"}, {"gateway"}, {"call"}, {"status"}, {"top"}, {"partition", "promote"}} {
		code, stdout, _ := run(t, append(path, "-h"))
		if code != ExitOK {
			t.Fatalf("%v -h: exit %d", path, code)
		}
		for _, want := range []string{"[$NEPTUNE_"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v -h names no variable", path)
			}
		}
		_, flags, _ := strings.Cut(stdout, "\nFlags:\n")
		flags, _, _ = strings.Cut(flags, "\n\n")
		for _, line := range strings.Split(flags, "\n") {
			if f := strings.TrimSpace(line); strings.HasPrefix(f, "--") && !strings.HasPrefix(f, "--help") && !strings.Contains(f, "[$NEPTUNE_") {
				t.Errorf("%v: flag without its variable: %s", path, f)
			}
		}
	}
}
