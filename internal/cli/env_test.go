package cli

import (
	"os"
	"path/filepath"
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

// TestNodeConfigFor: the config a node would run with, from its file, its
// variables and its flags, in that order of precedence; errors name the
// variable or the key.
func TestNodeConfigFor(t *testing.T) {
	file := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(file, []byte("id: file\nzone: z1\nservices: [{name: echo, partitions: [0]}]\nsecurity: {insecure: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fc, err := NodeConfigFor([]string{"--zone", "z3"}, map[string]string{
		"NEPTUNE_CONFIG": file, "NEPTUNE_ID": "neptune-0", "NEPTUNE_ZONE": "z2",
		"NEPTUNE_JOIN": "a:7946,b:7946", "NEPTUNE_SERVICE": "kv:0-3,7 work:0", "OTHER": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if fc.ID != "neptune-0" || fc.Zone != "z3" || strings.Join(fc.Join, " ") != "a:7946 b:7946" || len(fc.Services) != 3 || len(fc.Services[1].Partitions) != 5 {
		t.Fatalf("%+v", fc)
	}
	if _, err := NodeConfigFor(nil, map[string]string{"NEPTUNE_CONFIG": file, "NEPTUNE_RPC_PORT": "x"}); err == nil || !strings.Contains(err.Error(), "NEPTUNE_RPC_PORT") {
		t.Fatalf("bad variable: %v", err)
	}
	if _, err := NodeConfigFor(nil, map[string]string{"NEPTUNE_CONFIG": file, "NEPTUNE_GOSSIP_PORT": "70000"}); err == nil || !strings.Contains(err.Error(), "gossip_port") {
		t.Fatalf("bad port: %v", err)
	}
}

// TestGatewayConfigFor: the gateway's config file with its variables and
// flags applied, and the settings that are only flags.
func TestGatewayConfigFor(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(file, []byte("listen: :8080\ncapacity_grps: 100\nroutes: [{path_prefix: /e/, service: echo, method: echo, partition: 0}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, extra, err := GatewayConfigFor(nil, map[string]string{"NEPTUNE_CONFIG": file, "NEPTUNE_LISTEN": "0.0.0.0:8081",
		"NEPTUNE_JOIN": "seed:7946", "NEPTUNE_ADVERTISE": "10.0.0.1", "NEPTUNE_TLS_DIR": "/tls", "NEPTUNE_CERT": "gateway/gw-1"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "0.0.0.0:8081" || strings.Join(cfg.Join, ",") != "seed:7946" || extra.Advertise != "10.0.0.1" ||
		extra.Security.Dir != "/tls" || extra.Security.Cert != "gateway/gw-1" {
		t.Fatalf("%+v %+v", cfg, extra)
	}
	if _, _, err := GatewayConfigFor(nil, map[string]string{"NEPTUNE_CONFIG": file, "NEPTUNE_TLS_DIR": "/tls"}); err == nil || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("no join: %v", err)
	}
	if _, _, err := GatewayConfigFor(nil, map[string]string{"NEPTUNE_CONFIG": file, "NEPTUNE_JOIN": "seed:7946"}); err == nil || !strings.Contains(err.Error(), "--tls-dir") {
		t.Fatalf("no security: %v", err)
	}
}
