package security

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/pki"
)

// TestCertCollectorReportsTheCertificateExpiry: a secured member reports
// its certificate's NotAfter under its identity; an insecure one nothing.
func TestCertCollectorReportsTheCertificateExpiry(t *testing.T) {
	dir := t.TempDir()
	if err := Scratch(dir, "prod", "n1"); err != nil {
		t.Fatal(err)
	}
	m := load(t, dir, pki.Identity{Role: pki.RoleNode, Name: "n1"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.CertCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one series", mfs)
	}
	got := mfs[0].GetMetric()[0]
	if want := float64(m.TLS.Expires().Unix()); got.GetGauge().GetValue() != want || got.GetLabel()[0].GetValue() != "node/n1" {
		t.Errorf("%s = %v %v, want %v for node/n1", mfs[0].GetName(), got.GetLabel(), got.GetGauge().GetValue(), want)
	}
	insecure := prometheus.NewRegistry()
	insecure.MustRegister((&Material{}).CertCollector())
	if mfs, _ := insecure.Gather(); len(mfs) != 0 {
		t.Errorf("an insecure member reports %v", mfs)
	}
}
