package node

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/security"
)

// TestLogRingKeepsTheNewestLines: the ring keeps whole lines, newest
// last, and never more than its bound.
func TestLogRingKeepsTheNewestLines(t *testing.T) {
	r := newLogRing(100)
	for i := range 50 {
		r.Write([]byte(strings.Repeat("x", 8) + string(rune('a'+i%26)) + "\n"))
	}
	b := r.Bytes()
	if len(b) > 100 || len(b) != 10*10 {
		t.Fatalf("kept %d bytes, want 100", len(b))
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if last := lines[len(lines)-1]; last != "xxxxxxxx"+string(rune('a'+49%26)) {
		t.Errorf("last line %q, want the 50th", last)
	}
}

// TestTeeHandler: the node's logger gets every record it enables, the
// ring info and above, both with the node's attributes.
func TestTeeHandler(t *testing.T) {
	var outer bytes.Buffer
	ring := newLogRing(1 << 10)
	log := slog.New(teeHandler{slog.NewTextHandler(&outer, &slog.HandlerOptions{Level: slog.LevelDebug}),
		slog.NewTextHandler(ring, &slog.HandlerOptions{Level: slog.LevelInfo})}).With("node", "a").WithGroup("g")
	log.Debug("quiet", "k", 1)
	log.Info("loud", "k", 2)
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("debug not enabled though the outer handler takes it")
	}
	if o := outer.String(); !strings.Contains(o, "msg=quiet node=a g.k=1") || !strings.Contains(o, "msg=loud node=a g.k=2") {
		t.Errorf("outer handler got:\n%s", o)
	}
	if r := string(ring.Bytes()); strings.Contains(r, "quiet") || !strings.Contains(r, "msg=loud node=a g.k=2") {
		t.Errorf("ring got:\n%s", r)
	}
}

// TestDebugItems: each item of an unstarted node's bundle, and the
// errors that name what is allowed.
func TestDebugItems(t *testing.T) {
	var logs bytes.Buffer
	dir := t.TempDir()
	if err := security.Scratch(dir, "alpha", "n"); err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{Node: config.Node{Security: config.Security{Dir: dir, KeyringFile: filepath.Join(dir, "keyring.json")}, ID: "n",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.log.Info("hello from the node")
	get := func(item string, seconds int) (string, error) {
		var b bytes.Buffer
		err := n.debugItem(context.Background(), item, seconds, &b)
		return b.String(), err
	}
	for item, want := range map[string]string{
		"status":               `"node": "n"`,
		"config":               `"keyring": "[redacted]"`,
		"logs":                 `msg="hello from the node" node=n`,
		"goroutine":            "goroutine ",
		"dashboard/partitions": `"partitions"`,
	} {
		got, err := get(item, 0)
		if err != nil || !strings.Contains(got, want) {
			t.Errorf("%s: %v, want it to hold %q:\n%s", item, err, want, got)
		}
	}
	if got, _ := get("config", 0); strings.Contains(got, "keyring.json") {
		t.Errorf("config shows the keyring's path:\n%s", got)
	}
	if !strings.Contains(logs.String(), "hello from the node") {
		t.Error("the node's own logger did not get the line")
	}
	for item, want := range map[string]string{"core": "items: status, config", "dashboard/x": "views: cluster"} {
		if _, err := get(item, 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", item, err, want)
		}
	}
	if _, err := get("cpu", 61); err == nil || !strings.Contains(err.Error(), "1..60") {
		t.Errorf("cpu 61 s: %v", err)
	}
}
