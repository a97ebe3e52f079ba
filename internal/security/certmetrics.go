package security

import "github.com/prometheus/client_golang/prometheus"

// certExpiryDesc is the expiry of the certificate a member presents.
var certExpiryDesc = prometheus.NewDesc("neptune_tls_certificate_expiry_timestamp_seconds",
	"When the certificate this member presents expires, in Unix seconds (it is re-read as files rotate); absent on an insecure cluster.",
	[]string{"identity"}, nil)

// CertCollector reports when the member's certificate expires, read at
// scrape time so a rotated file shows at once (docs/alerts.yaml alerts on
// it). It reports nothing for an insecure member.
func (m *Material) CertCollector() prometheus.Collector { return certCollector{m} }

type certCollector struct{ m *Material }

func (certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiryDesc }

func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m == nil || c.m.Insecure() {
		return
	}
	ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, float64(c.m.TLS.Expires().Unix()), c.m.TLS.Identity().String())
}
