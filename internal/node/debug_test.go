package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
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
