package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/neptune-cluster/neptune/internal/version"
)

// run executes the neptune command line and returns its exit code,
// stdout and stderr.
func run(t *testing.T, args []string, extra ...*cobra.Command) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(context.Background(), args, &out, &errOut, extra...)
	return code, out.String(), errOut.String()
}

// commandPaths lists the argument paths of every visible command,
// including cobra's help and completion commands ([] is the root).
func commandPaths(extra ...*cobra.Command) [][]string {
	root := newRoot(extra...)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if !sub.Hidden {
				walk(sub, append(slices.Clip(path), sub.Name()))
			}
		}
	}
	walk(root, nil)
	return paths
}

func TestHelpOfEveryCommandGoesToStdoutAndExitsZero(t *testing.T) {
	paths := commandPaths()
	for _, want := range []string{"node", "call", "status", "partition promote", "gateway", "gateway hash-key", "version", "completion bash"} {
		if !slices.ContainsFunc(paths, func(p []string) bool { return strings.Join(p, " ") == want }) {
			t.Errorf("no command %q in %v", want, paths)
		}
	}
	for _, path := range paths {
		for _, h := range []string{"-h", "--help"} {
			args := append(slices.Clip(path), h)
			code, stdout, stderr := run(t, args)
			if code != ExitOK || !strings.Contains(stdout, "Usage:") || stderr != "" {
				t.Errorf("neptune %s: exit %d, stdout %q, stderr %q; want 0 with usage on stdout", strings.Join(args, " "), code, stdout, stderr)
			}
		}
	}
	if _, stdout, _ := run(t, []string{"-h"}); !strings.Contains(stdout, "Exit status:") {
		t.Errorf("root help does not document the exit codes:\n%s", stdout)
	}
}

func TestGroupCommandsPrintHelpBareAndRejectUnknownSubcommands(t *testing.T) {
	for _, args := range [][]string{nil, {"partition"}, {"completion"}} {
		if code, stdout, stderr := run(t, args); code != ExitOK || !strings.Contains(stdout, "Usage:") || stderr != "" {
			t.Errorf("neptune %v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	for _, tc := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"bogus"}, "neptune: unknown command \"bogus\""},
		{[]string{"partition", "demote"}, "neptune partition: unknown command \"demote\""},
		{[]string{"node", "extra"}, "neptune node: unexpected argument \"extra\""},
		{[]string{"version", "2"}, "neptune version: unexpected argument \"2\""},
	} {
		code, stdout, stderr := run(t, tc.args)
		if code != ExitUsage || stdout != "" || !strings.HasPrefix(stderr, tc.prefix) {
			t.Errorf("neptune %v: exit %d, stdout %q, stderr %q; want 2 and stderr starting %q", tc.args, code, stdout, stderr, tc.prefix)
		}
	}
}

func TestUnknownFlagIsAUsageErrorOnStderr(t *testing.T) {
	for _, path := range commandPaths() {
		if len(path) > 0 && path[0] == "help" {
			continue // help takes topics, not flags of its own
		}
		args := append(slices.Clip(path), "--no-such-flag")
		code, stdout, stderr := run(t, args)
		prefix := strings.Join(append([]string{"neptune"}, path...), " ") + ": unknown flag: --no-such-flag"
		if code != ExitUsage || stdout != "" || !strings.HasPrefix(stderr, prefix) {
			t.Errorf("neptune %s: exit %d, stdout %q, stderr %q; want 2 and stderr starting %q", strings.Join(args, " "), code, stdout, stderr, prefix)
		}
	}
}

func TestBadArgumentsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"call"}, `required flag(s) "join", "service", "method" not set`},
		{[]string{"call", "--join", "127.0.0.1:1", "--service", "kv"}, `"method" not set`},
		{[]string{"status"}, `one of --join or --gateway is required`},
		{[]string{"partition", "promote", "--join", "a:1", "--service", "kv"}, `"partition" not set`},
		{[]string{"partition", "promote", "--join", "a:1", "--service", "kv", "--partition", "-1"}, "--partition must be >= 0"},
		{[]string{"call", "--join", "a:1", "--service", "kv", "--method", "get", "--partition", "one"}, `invalid argument "one"`},
		{[]string{"node", "--id", "n1", "--service", "kv"}, `--service "kv": want name:partitions`},
		{[]string{"node", "--id", "n1", "--service", "kv:3-1"}, `--service "kv:3-1": partition range`},
		{[]string{"node", "--id", "n1", "--service", "echo:0", "--log-level", "loud"}, `--log-level "loud"`},
	} {
		code, stdout, stderr := run(t, tc.args)
		if code != ExitUsage || stdout != "" || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "--help' for usage") {
			t.Errorf("neptune %v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

func TestInvalidConfigFailsNamingTheField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(path, []byte("id: n1\ngossip_port: 70000\nservices:\n  - {name: echo, partitions: [0]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, []string{"node", "--config", path})
	if code != ExitFailed || !strings.HasPrefix(stderr, "neptune node: config: gossip_port") {
		t.Errorf("exit %d, stderr %q; want 1 naming gossip_port", code, stderr)
	}
	code, _, stderr = run(t, []string{"node", "--config", path, "--gossip-port", "-1"})
	if code != ExitFailed || !strings.Contains(stderr, "gossip_port must be in 0..65535, got -1") {
		t.Errorf("exit %d, stderr %q; want the flag's value to override the file's and fail validation", code, stderr)
	}
	code, _, stderr = run(t, []string{"node", "--config", filepath.Join(t.TempDir(), "missing.yaml")})
	if code != ExitFailed || !strings.HasPrefix(stderr, "neptune node: config: ") {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr)
	}
}

// parseNode parses a `neptune node` command line (after gnuArgs, as
// Execute does) and resolves its config without starting the node.
func parseNode(t *testing.T, args ...string) (FileConfig, error) {
	t.Helper()
	root := newRoot()
	args = gnuArgs(root, append([]string{"node"}, args...))[1:]
	var o nodeOptions
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return o.fileConfig(fs)
}

func TestNodeFlagsOverrideTheConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.yaml")
	err := os.WriteFile(path, []byte(`id: n1
host: 10.0.0.1
gossip_port: 7946
rpc_port: 7000
pprof: true
join: [a:1]
announce_interval: 2s
announce_ttl: 10s
balance: {policy: polling, services: {pcache: affinity, kv: random}}
services:
  - {name: echo, partitions: [0]}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}

	fc, err := parseNode(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if fc.ID != "n1" || fc.Host != "10.0.0.1" || fc.GossipPort != 7946 || fc.RPCPort != 7000 || !fc.Pprof ||
		!slices.Equal(fc.Join, []string{"a:1"}) || fc.AnnounceInterval != Duration(2*time.Second) || fc.Balance.Policy != "polling" {
		t.Errorf("the file alone: flags' defaults overrode it: %+v", fc)
	}

	fc, err = parseNode(t, "--config", path, "--id", "n2", "--gossip-port", "0", "--pprof=false",
		"--join", "b:1,c:1", "--join", "d:1", "--announce-ttl", "20s", "--balance", "random", "--service", "kv:0-2,5",
		"--max-inflight-bytes", "32MiB", "--balance-service", "kv=polling", "--balance-service", "feed=affinity")
	if err != nil {
		t.Fatal(err)
	}
	if fc.ID != "n2" || fc.GossipPort != 0 || fc.Pprof || fc.Host != "10.0.0.1" || fc.RPCPort != 7000 || fc.MaxInflightBytes != 32<<20 {
		t.Errorf("scalars: %+v", fc)
	}
	if !slices.Equal(fc.Join, []string{"b:1", "c:1", "d:1"}) {
		t.Errorf("--join b:1,c:1 --join d:1 gave %v", fc.Join)
	}
	if fc.AnnounceInterval != Duration(2*time.Second) || fc.AnnounceTTL != Duration(20*time.Second) || fc.Balance.Policy != "random" {
		t.Errorf("durations and policy: %+v", fc)
	}
	if want := map[string]string{"pcache": "affinity", "kv": "polling", "feed": "affinity"}; !maps.Equal(fc.Balance.Services, want) {
		t.Errorf("--balance-service adds to the file's balance.services, replacing a service's: %v, want %v", fc.Balance.Services, want)
	}
	if len(fc.Services) != 2 || fc.Services[1].Name != "kv" || !slices.Equal([]int(fc.Services[1].Partitions), []int{0, 1, 2, 5}) {
		t.Errorf("--service adds to the file's services: %+v", fc.Services)
	}

	// Go-style single-dash flags, as scripts and re-launched nodes wrote
	// them before, still work.
	fc, err = parseNode(t, "-config", path, "-id", "n3", "-join", "e:1", "-rpc-port=7001")
	if err != nil {
		t.Fatal(err)
	}
	if fc.ID != "n3" || !slices.Equal(fc.Join, []string{"e:1"}) || fc.RPCPort != 7001 {
		t.Errorf("single-dash flags: %+v", fc)
	}

	// Without a file, flags alone make the config; validation names the key.
	if _, err := parseNode(t, "--service", "echo:0"); err == nil || !strings.Contains(err.Error(), "id is required") {
		t.Errorf("no id: %v", err)
	}
}

func TestGNUArgs(t *testing.T) {
	root := newRoot()
	for _, tc := range []struct{ in, want string }{
		{"node -id n1 -service kv:0 --join a -pprof -h", "node --id n1 --service kv:0 --join a --pprof -h"},
		{"node -rpc-port=7 -help", "node --rpc-port=7 --help"},
		{"call --body -id -service kv", "call --body -id --service kv"},
		{"call -body -id -- -service", "call --body -id -- -service"},
		{"node -bogus x -i", "node -bogus x -i"},
		{"partition promote -partition 3 -node n2", "partition promote --partition 3 --node n2"},
		{"status node -join a", "status node --join a"},
	} {
		if got := strings.Join(gnuArgs(root, strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("gnuArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	raw := &cobra.Command{Use: "raw", DisableFlagParsing: true, Run: func(*cobra.Command, []string) {}}
	root.AddCommand(raw)
	if got := strings.Join(gnuArgs(root, strings.Fields("raw -join a")), " "); got != "raw -join a" {
		t.Errorf("a command parsing its own flags got %q", got)
	}
}

func TestVersion(t *testing.T) {
	code, stdout, stderr := run(t, []string{"version"})
	if code != ExitOK || !strings.HasPrefix(stdout, "neptune ") || !strings.Contains(stdout, runtime.Version()) || stderr != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	var b bytes.Buffer
	printVersion(&b, &debug.BuildInfo{
		GoVersion: "go1.99",
		Main:      debug.Module{Path: "github.com/neptune-cluster/neptune", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	})
	for _, want := range []string{"neptune " + version.Release + "\n", "module v1.2.3\n", "revision abc123 (modified)\n", "2026-01-02T03:04:05Z", "go1.99 "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("version output %q lacks %q", b.String(), want)
		}
	}
	// The build's stamp wins over the toolchain's record.
	version.Commit = "f00d"
	defer func() { version.Commit = "" }()
	b.Reset()
	printVersion(&b, &debug.BuildInfo{GoVersion: "go1.99", Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}})
	if !strings.Contains(b.String(), "revision f00d\n") {
		t.Errorf("stamped build prints %q", b.String())
	}
}

func TestExtraCommandsFollowTheConventions(t *testing.T) {
	extra := func() []*cobra.Command {
		lab := &cobra.Command{Use: "lab", Short: "lab commands"}
		lab.AddCommand(
			&cobra.Command{Use: "fail", Short: "fails", RunE: func(*cobra.Command, []string) error { return errors.New("boom") }},
			&cobra.Command{Use: "misuse", Short: "bad argument", RunE: func(*cobra.Command, []string) error { return Usagef("--rounds must be >= 1") }},
			&cobra.Command{Use: "helper", Hidden: true, RunE: func(cmd *cobra.Command, _ []string) error {
				fmt.Fprintln(cmd.OutOrStdout(), "helper ran")
				return nil
			}},
		)
		return []*cobra.Command{lab}
	}
	for _, tc := range []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"lab", "fail"}, ExitFailed, "", "neptune lab fail: boom\n"},
		{[]string{"lab", "misuse"}, ExitUsage, "", "neptune lab misuse: --rounds must be >= 1\n"},
		{[]string{"lab", "helper"}, ExitOK, "helper ran\n", ""},
		{[]string{"lab", "-h"}, ExitOK, "fails", ""},
		{[]string{"lab", "fail", "-h"}, ExitOK, "Usage:", ""},
	} {
		code, stdout, stderr := run(t, tc.args, extra()...)
		if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.HasPrefix(stderr, tc.errs) {
			t.Errorf("neptune %v: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, stdout, stderr, tc.code, tc.stdout, tc.errs)
		}
	}
	if _, stdout, _ := run(t, []string{"lab", "-h"}, extra()...); strings.Contains(stdout, "helper") {
		t.Errorf("hidden command listed in help:\n%s", stdout)
	}
}
