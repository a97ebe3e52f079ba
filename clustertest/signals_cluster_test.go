package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestSIGHUPReloadsAndNeverKills: a node process given SIGHUP stays up,
// takes the config file's new log level (debug lines appear), and says
// what it reloaded; a config that no longer parses changes nothing.
func TestSIGHUPReloadsAndNeverKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "node.yaml")
	write := func(body string) {
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const base = "id: hup\nsecurity: {insecure: true}\nservices:\n  - name: echo\n    partitions: [0]\n"
	write(base + "log_level: info\n")
	logPath := filepath.Join(dir, "node.log")
	cmd, up, exited := startNodeProcess(t, logPath, "node", "--config", cfg)
	select {
	case <-up:
	case err := <-exited:
		t.Fatalf("node exited before it was up: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("node not up")
	}
	logHas := func(s string) bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), s)
	}
	hangup := func(want string) {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for !logHas(want) {
			select {
			case err := <-exited:
				t.Fatalf("SIGHUP stopped the node: %v", err)
			case <-ctx.Done():
				b, _ := os.ReadFile(logPath)
				t.Fatalf("no %q after SIGHUP; log:\n%s", want, b)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if logHas("level=DEBUG") {
		t.Fatal("debug lines at level info")
	}
	write(base + "log_level: debug\n")
	hangup("SIGHUP: log level changed")
	write("id: [broken\n")
	hangup("SIGHUP: config not reloaded")
	select {
	case err := <-exited:
		t.Fatalf("node died: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestNodeStartedBeforeItsSeedJoinsWhenItComes: start order does not
// matter: a node whose seed is not up keeps trying (with backoff, by
// default until stopped) and joins when the seed comes, here 3 s later,
// named by host name.
func TestNodeStartedBeforeItsSeedJoinsWhenItComes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	dir := t.TempDir()
	port, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	_, early, earlyExit := startNodeProcess(t, filepath.Join(dir, "early.log"), "node", "--id", "early", "--insecure", "--service", "echo:1",
		"--join", fmt.Sprintf("localhost:%d", port))
	select {
	case <-early:
		t.Fatal("up without its seed")
	case err := <-earlyExit:
		t.Fatalf("gave up waiting for its seed: %v", err)
	case <-time.After(3 * time.Second):
	}
	_, seed, _ := startNodeProcess(t, filepath.Join(dir, "seed.log"), "node", "--id", "seed", "--insecure", "--service", "echo:0",
		"--gossip-port", fmt.Sprint(port))
	for _, ch := range []<-chan struct{}{seed, early} {
		select {
		case <-ch:
		case err := <-earlyExit:
			t.Fatalf("early node exited: %v", err)
		case <-time.After(20 * time.Second):
			b, _ := os.ReadFile(filepath.Join(dir, "early.log"))
			t.Fatalf("not joined after the seed came up; log:\n%s", b)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "early.log"))
	if !strings.Contains(string(b), "seeds not reachable yet, retrying") {
		t.Fatalf("no retry logged:\n%s", b)
	}
}
