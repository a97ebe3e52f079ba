package neptune_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(neptuneBinary(t), "node", "--config", cfg)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), " up: ") {
				up <- true
			}
		}
	}()
	go func() { exited <- cmd.Wait() }()
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
