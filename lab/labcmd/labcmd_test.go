package labcmd

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/internal/cli"
)

// execute runs the neptune command line with the lab's commands, as
// lab/cmd/neptune does, and returns its exit code, stdout and stderr.
func execute(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	outF, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	errF, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	saveOut, saveErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = outF, errF
	code = cli.Execute(context.Background(), args, Commands()...)
	os.Stdout, os.Stderr = saveOut, saveErr
	outF.Close()
	errF.Close()
	o, _ := os.ReadFile(outF.Name())
	e, _ := os.ReadFile(errF.Name())
	return code, string(o), string(e)
}

// paths lists the argument paths of every lab command, hidden or not.
func paths() (visible, hidden [][]string) {
	var walk func(c *cobra.Command, path []string, hide bool)
	walk = func(c *cobra.Command, path []string, hide bool) {
		if hide {
			hidden = append(hidden, path)
		} else {
			visible = append(visible, path)
		}
		for _, sub := range c.Commands() {
			walk(sub, append(slices.Clip(path), sub.Name()), hide || sub.Hidden)
		}
	}
	for _, c := range Commands() {
		walk(c, []string{c.Name()}, c.Hidden)
	}
	return visible, hidden
}

func TestEveryCommandsHelpGoesToStdoutAndExitsZero(t *testing.T) {
	visible, hidden := paths()
	for _, want := range []string{"demo", "bench overhead", "bench lb", "bench replication", "bench wal", "bench apps", "bench dac",
		"bench sched",
		"sim lb", "sim sched", "sim classes", "sim dac", "sim gage", "sim replication"} {
		if !slices.ContainsFunc(visible, func(p []string) bool { return strings.Join(p, " ") == want }) {
			t.Errorf("no command %q in %v", want, visible)
		}
	}
	for _, want := range []string{"bench echo-server", "bench http-program", "bench lb-client"} {
		if !slices.ContainsFunc(hidden, func(p []string) bool { return strings.Join(p, " ") == want }) {
			t.Errorf("no hidden command %q in %v", want, hidden)
		}
	}
	for _, path := range append(visible, hidden...) {
		for _, h := range []string{"-h", "--help"} {
			args := append(slices.Clip(path), h)
			code, stdout, stderr := execute(t, args...)
			if code != cli.ExitOK || !strings.Contains(stdout, "Usage:") || stderr != "" {
				t.Errorf("neptune %s: exit %d, stdout %q, stderr %q; want 0 with usage on stdout", strings.Join(args, " "), code, stdout, stderr)
			}
		}
	}
	_, stdout, _ := execute(t, "bench", "-h")
	for _, verb := range []string{"echo-server", "http-program", "lb-client"} {
		if strings.Contains(stdout, verb) {
			t.Errorf("bench help lists the hidden verb %s:\n%s", verb, stdout)
		}
	}
}

func TestBadValuesAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--nodes", "4", "--degree", "5"},
		{"bench", "lb", "--workloads", "medium"},
		{"bench", "lb", "--loads", "1.2"},
		{"bench", "lb", "--nodes", "1"},
		{"bench", "lb", "--duration", "100ms", "--warmup", "1s"},
		{"bench", "lb", "--scale", "0"},
		{"bench", "lb", "--sections", "fig36"},
		{"bench", "dac", "--stop-k", "20"},
		{"bench", "dac", "--rates", "x"},
		{"bench", "replication", "--degrees", "4-1"},
		{"bench", "replication", "--sections", "fig53"},
		{"bench", "apps", "--sections", "gpu"},
		{"bench", "wal", "--read", "0"},
		{"sim", "lb", "--sections", "3.9"},
		{"sim", "lb", "--workloads", "nope"},
		{"sim", "lb", "--loads", "1.5"},
		{"sim", "lb", "--nodes", "0"},
		{"sim", "sched", "--workers", "0"},
		{"sim", "classes", "--duration", "10s"},
		{"sim", "dac", "--sections", "nope"},
		{"sim", "gage", "--sections", "table9"},
		{"sim", "gage", "--duration", "1s"},
		{"sim", "gage", "--scale-subscribers", "1"},
		{"sim", "replication", "--degrees", "1,2"},
		{"sim", "replication", "--factors", "0.5"},
		{"sim", "replication", "--degrees", "1,4,9"},
		{"sim", "nope"},
		{"bench", "lb", "extra"},
	} {
		code, stdout, stderr := execute(t, args...)
		if code != cli.ExitUsage || stderr == "" {
			t.Errorf("neptune %s: exit %d, stdout %q, stderr %q; want 2 with the error on stderr", strings.Join(args, " "), code, stdout, stderr)
		}
	}
}

func TestExperimentsRunFromTheCommandLine(t *testing.T) {
	out := filepath.Join(t.TempDir(), "figures") // made by the command
	code, stdout, stderr := execute(t, "sim", "sched", "--out", out, "--duration", "20s", "--seeds", "1", "--step", "100", "--dispatch", "0")
	if code != cli.ExitOK || !strings.Contains(stdout, "goal Adaptive within") {
		t.Fatalf("sim sched: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "sched_loss.csv")); err != nil {
		t.Error(err)
	}
	code, stdout, stderr = execute(t, "bench", "wal", "-n", "40", "--read", "10", "--rounds", "1", "--dir", t.TempDir())
	if code != cli.ExitOK || !strings.Contains(stdout, "pebble") {
		t.Fatalf("bench wal: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	out = t.TempDir()
	code, stdout, stderr = execute(t, "sim", "gage", "--sections", "table1", "--duration", "2s", "--warmup", "500ms", "--seed", "3", "--out", out)
	if code != cli.ExitOK || !strings.Contains(stdout, "Table 1: isolation") || strings.Contains(stdout, "Table 2") {
		t.Fatalf("sim gage --sections table1: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if ents, _ := os.ReadDir(out); len(ents) == 0 {
		t.Error("sim gage --out wrote nothing")
	}
	// --sections replaces the default list.
	out = t.TempDir()
	code, stdout, stderr = execute(t, "sim", "dac", "--sections", "scale", "--quick", "--duration", "300ms", "--out", out)
	if code != cli.ExitOK || strings.Contains(stdout, "Fig 14") || !strings.Contains(stdout, "Fig 22") {
		t.Fatalf("sim dac --sections scale: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
