package security

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/clock"
)

// TestRefusalsCountEveryOneAndLogOnePerReasonAndSource: every refusal is
// counted; the log gets one WARN line per reason and source per interval,
// and the next line says how many were held back.
func TestRefusalsCountEveryOneAndLogOnePerReasonAndSource(t *testing.T) {
	var out bytes.Buffer
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	r := NewRefusals(slog.New(slog.NewTextHandler(&out, nil)), clk)
	reg := prometheus.NewRegistry()
	if err := r.Register(reg); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("x509: certificate signed by unknown authority")
	for range 5 {
		r.Refuse("tls_unknown_ca", "10.0.0.9", bad)
	}
	r.Refuse("tls_unknown_ca", "10.0.0.8", bad)
	r.Refuse("poll_hmac", "10.0.0.9", bad)
	lines := func() []string { return strings.Split(strings.TrimSpace(out.String()), "\n") }
	if got := lines(); len(got) != 3 {
		t.Fatalf("%d lines for 3 reason/source pairs:\n%s", len(got), out.String())
	}
	for _, l := range lines() {
		if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "unknown authority") {
			t.Errorf("line %q: want WARN with the error", l)
		}
	}
	clk.Advance(DefaultRefusalLogEvery)
	r.Refuse("tls_unknown_ca", "10.0.0.9", bad)
	last := lines()[len(lines())-1]
	if len(lines()) != 4 || !strings.Contains(last, "suppressed=4") || !strings.Contains(last, "source=10.0.0.9") {
		t.Fatalf("after the interval: %q, want a line saying 4 were suppressed", last)
	}
	if got := r.Count("tls_unknown_ca"); got != 7 {
		t.Fatalf("counted %v unknown-CA refusals, want 7", got)
	}
	if got := r.Count("poll_hmac"); got != 1 {
		t.Fatalf("Count(poll_hmac) = %v, want 1", got)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != RefusedMetric || len(mfs[0].GetMetric()) != 2 {
		t.Fatalf("registry holds %v (%v), want %s with one series per reason", mfs, err, RefusedMetric)
	}
}
