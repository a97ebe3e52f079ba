package clustertest

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/neptune-cluster/neptune/internal/pki"
)

// TestSecuredHTTPListenerRefusesOutsiders: on a secured cluster a
// node's /metrics and dashboard refuse plain HTTP (403) and HTTPS
// without an identity (401); a scraper reads /metrics but not the
// dashboard; an operator reads both; the probes stay open on plain HTTP.
func TestSecuredHTTPListenerRefusesOutsiders(t *testing.T) {
	nodes, dir := securedKVCluster(t)
	addr := nodes[0].MetricsAddr()
	plain := &http.Client{Timeout: 5 * time.Second}
	anon := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	scraper := httpsAs(t, dir, pki.Identity{Role: pki.RoleScraper, Name: "prom"})
	operator := httpsAs(t, dir, pki.Identity{Role: pki.RoleOperator, Name: "operator"})
	for _, tc := range []struct {
		what string
		hc   *http.Client
		url  string
		code int
		want string
	}{
		{"plain /livez", plain, "http://" + addr + "/livez", 200, "ok"},
		{"plain /readyz", plain, "http://" + addr + "/readyz", 0, ""}, // 200 or 503: it answers
		{"plain /metrics", plain, "http://" + addr + "/metrics", 403, "https"},
		{"plain dashboard", plain, "http://" + addr + "/cluster", 403, "https"},
		{"/metrics without identity", anon, "https://" + addr + "/metrics", 401, "unauthenticated"},
		{"dashboard JSON without identity", anon, "https://" + addr + "/api/dashboard/partitions", 401, "unauthenticated"},
		{"scraper /metrics", scraper, "https://" + addr + "/metrics", 200, "neptune_build_info"},
		{"scraper dashboard", scraper, "https://" + addr + "/cluster", 403, "scraper/prom"},
		{"operator dashboard", operator, "https://" + addr + "/cluster", 200, "a1"},
		{"operator dashboard JSON", operator, "https://" + addr + "/api/dashboard/partitions", 200, `"partitions"`},
		{"operator /metrics", operator, "https://" + addr + "/metrics", 200, "neptune_replica_role"},
	} {
		code, body := getStatus(t, tc.hc, tc.url)
		if tc.code != 0 && code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %.200q, want %d and %q", tc.what, code, body, tc.code, tc.want)
		}
	}
}

// series is one promtool input series.
type series struct {
	name   string
	labels map[string]string
	values string
}

func (s series) selector() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.labels)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, s.labels[k]))
	}
	return s.name + "{" + strings.Join(parts, ", ") + "}"
}

func (s series) has(labels map[string]string) bool {
	for k, v := range labels {
		if s.labels[k] != v {
			return false
		}
	}
	return true
}

// steps is how many samples each input series has (15 s apart: 20 min).
const steps = 80

var ruleMetric = regexp.MustCompile(`\b(neptune_[a-z_]+|up)\b`)

// TestAlertRulesOnScrapedMetrics checks docs/alerts.yaml with promtool
// against series made from what a real secured cluster's nodes export:
// every metric a rule reads must be in their scrapes (a renamed metric
// fails here), the healthy cluster's series fire nothing, and each alert
// fires on the scraped series of one partition, replica or node turned
// bad: no primary, a follower lagging beyond the staleness bound,
// elections flapping, a certificate about to expire, a node down.
func TestAlertRulesOnScrapedMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("NO PROMTOOL: testing docs/alerts.yaml needs promtool (apt-get install prometheus; .ci/run installs it)")
	}
	rulesPath, err := filepath.Abs(filepath.Join(repoRoot, "docs", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", rulesPath).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}

	nodes, dir := securedKVCluster(t)
	c := nodes[0].Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for p := range 2 {
		for i := range 5 {
			if _, err := writeRetrying(ctx, c, nil, p, fmt.Sprintf("k%d=v", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	scraper := httpsAs(t, dir, pki.Identity{Role: pki.RoleScraper, Name: "prom"})
	scrapes := map[string]map[string]*dto.MetricFamily{}
	// Until every partition shows a primary and its followers' lag (a
	// metric renamed never shows: the checks below name it).
	settled := func() bool {
		primaries, followers := 0, 0
		for i, nd := range nodes {
			mfs := scrapeFamilies(t, scraper, nd.MetricsAddr())
			scrapes[fmt.Sprint("a", i+1)] = mfs
			for _, m := range mfs["neptune_partition_has_primary"].GetMetric() {
				if m.GetGauge().GetValue() == 1 {
					primaries++
				}
			}
			followers += len(mfs["neptune_replica_lag_seconds"].GetMetric())
		}
		return primaries == 6 && followers == 4
	}
	for deadline := time.Now().Add(15 * time.Second); !settled() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}

	// The rules as promtool should test them: annotations (templates
	// promtool check rules validated) dropped, so alerts compare by labels.
	raw, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string           `yaml:"name"`
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			delete(r, "annotations")
			for _, name := range ruleMetric.FindAllString(fmt.Sprint(r["expr"]), -1) {
				used[name] = true
			}
			alerts = append(alerts, fmt.Sprint(r["alert"]))
		}
	}
	stripped, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := os.WriteFile(filepath.Join(tmp, "rules.yaml"), stripped, 0o644); err != nil {
		t.Fatal(err)
	}

	// Every series the rules read, from the scrapes, as Prometheus would
	// store them (instance and job added), plus up.
	var healthy []series
	for _, inst := range slices.Sorted(maps.Keys(scrapes)) {
		healthy = append(healthy, series{"up", map[string]string{"instance": inst, "job": "neptune"}, constant(1)})
		for name, mf := range scrapes[inst] {
			if !used[name] {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{"instance": inst, "job": "neptune"}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				v := m.GetGauge().GetValue()
				if mf.GetType() == dto.MetricType_COUNTER {
					v = m.GetCounter().GetValue()
				}
				healthy = append(healthy, series{name, labels, constant(v)})
			}
		}
	}
	for name := range used {
		if !slices.ContainsFunc(healthy, func(s series) bool { return s.name == name }) {
			t.Errorf("docs/alerts.yaml reads %s, which no node exports", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	find := func(name string, labels map[string]string) series {
		t.Helper()
		for _, s := range healthy {
			if s.name == name && s.has(labels) {
				return s
			}
		}
		t.Fatalf("no scraped %s with %v", name, labels)
		return series{}
	}
	// with is the healthy series with those matching name and labels
	// given values instead.
	with := func(name string, labels map[string]string, values string) []series {
		out := slices.Clone(healthy)
		for i, s := range out {
			if s.name == name && s.has(labels) {
				out[i].values = values
			}
		}
		return out
	}
	lag := find("neptune_replica_lag_seconds", map[string]string{"partition": "1"})
	bound := find("neptune_replica_staleness_bound_seconds", map[string]string{"partition": "1"})
	boundSecs, _ := strconv.ParseFloat(strings.Split(bound.values, "+")[0], 64)
	primaryOf1 := lag.labels["instance"]
	cert := find("neptune_tls_certificate_expiry_timestamp_seconds", map[string]string{"instance": "a2"})

	type want struct {
		alert  string
		labels []map[string]string
	}
	type scenario struct {
		what   string
		series []series
		want   []want // alerts not listed must not fire
	}
	p0 := map[string]string{"service": "kv", "partition": "0"}
	scenarios := []scenario{
		{what: "healthy", series: healthy},
		{what: "partition 0 without a primary", series: with("neptune_partition_has_primary", p0, constant(0)),
			want: []want{{"NeptunePartitionNoPrimary", []map[string]string{{"service": "kv", "partition": "0", "severity": "critical"}}}}},
		{what: "a follower of partition 1 lagging beyond the bound",
			series: with(lag.name, lag.labels, constant(boundSecs+5)),
			want:   []want{{"NeptuneReplicaLagging", []map[string]string{withKey(lag.labels, "severity", "warning")}}}},
		{what: "partition 0 electing a primary every 15 s",
			series: with("neptune_replica_elections_total", map[string]string{"service": "kv", "partition": "0", "instance": "a1"}, "0+1x"+strconv.Itoa(steps)),
			want:   []want{{"NeptuneLeaseFlapping", []map[string]string{{"service": "kv", "partition": "0", "severity": "warning"}}}}},
		{what: "a2's certificate expiring in a day (the test's clock starts at 0)",
			series: with(cert.name, cert.labels, constant(86400)),
			want: []want{
				{"NeptuneCertificateExpiringSoon", []map[string]string{withKey(cert.labels, "severity", "warning")}},
				{"NeptuneCertificateExpiring", []map[string]string{withKey(cert.labels, "severity", "critical")}},
			}},
		{what: primaryOf1 + " down", series: with("up", map[string]string{"instance": primaryOf1}, "1x4 0x"+strconv.Itoa(steps-5)),
			want: []want{{"NeptuneNodeDown", []map[string]string{{"instance": primaryOf1, "job": "neptune", "severity": "critical"}}}}},
	}

	// One promtool test per scenario, each alert checked at 10 min.
	type alertTest struct {
		EvalTime  string `yaml:"eval_time"`
		Alertname string `yaml:"alertname"`
		ExpAlerts []struct {
			ExpLabels map[string]string `yaml:"exp_labels"`
		} `yaml:"exp_alerts"`
	}
	type inputSeries struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type test struct {
		Name        string        `yaml:"name"`
		Interval    string        `yaml:"interval"`
		InputSeries []inputSeries `yaml:"input_series"`
		AlertTests  []alertTest   `yaml:"alert_rule_test"`
	}
	var tests []test
	for _, sc := range scenarios {
		tc := test{Name: sc.what, Interval: "15s"}
		for _, s := range sc.series {
			tc.InputSeries = append(tc.InputSeries, inputSeries{s.selector(), s.values})
		}
		for _, a := range alerts {
			at := alertTest{EvalTime: "10m", Alertname: a, ExpAlerts: []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			}{}}
			for _, w := range sc.want {
				if w.alert == a {
					for _, l := range w.labels {
						at.ExpAlerts = append(at.ExpAlerts, struct {
							ExpLabels map[string]string `yaml:"exp_labels"`
						}{l})
					}
				}
			}
			tc.AlertTests = append(tc.AlertTests, at)
		}
		tests = append(tests, tc)
	}
	file, err := yaml.Marshal(map[string]any{"rule_files": []string{"rules.yaml"}, "evaluation_interval": "15s", "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	testPath := filepath.Join(tmp, "alerts_test.yaml")
	if err := os.WriteFile(testPath, file, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yaml")
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s\n(input: %s)", err, out, testPath)
	}
	t.Logf("promtool: %d scenarios x %d alerts over %d scraped series: %s", len(scenarios), len(alerts), len(healthy), strings.TrimSpace(string(out)))
}
