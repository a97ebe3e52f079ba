package clustertest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// chromium finds Debian's chromium (or another Chrome). In CI a missing
// browser fails the test; elsewhere it skips, loudly.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "NO CHROMIUM: the dashboard's browser test needs Debian's chromium (apt-get install chromium; .ci/run installs it)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED: " + msg)
	return ""
}

// TestBrowser drives the dashboard in headless Chromium against three
// real node processes and a gateway: every view loads without console
// errors and shows its data, filters narrow the tables, a SIGKILLed node
// greys out on the live page, and the partition it led shows a new
// primary with a higher epoch. With NEPTUNE_SCREENSHOTS=1 it writes a PNG
// of each view to docs/figures/dashboard/.
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes and a browser")
	}
	browser := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	started := time.Now()

	bin := neptuneBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	yaml := `services:
  - name: kv
    partitions: 0-3
    replication: {level: 3, nodes: [d1, d2, d3], degree: 3}
  - name: search
    partitions: 0-2
  - name: echo
    partitions: 0
    classes:
      - {name: gold, yield: throughput, value: 4, deadline: 2s, guarantee: 0.6}
      - {name: bronze, yield: response_time, value: 1, deadline: 1s}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cl, err := localcluster.NewSecure(bin, dir, "dash")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	nodes := map[string]*localcluster.Node{}
	dash := map[string]string{} // node -> metrics address
	for _, id := range []string{"d1", "d2", "d3"} {
		port, err := localcluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		dash[id] = fmt.Sprintf("127.0.0.1:%d", port)
		n, err := cl.Start(ctx, localcluster.Spec{ID: id, Args: []string{"--config", cfg, "--data-dir", filepath.Join(dir, id),
			"--metrics", dash[id], "--announce-interval", "200ms", "--announce-ttl", "1s"}})
		if err != nil {
			t.Fatal(err)
		}
		nodes[id] = n
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: cl.ClientSecurity("client/client"), Join: cl.Seeds(), AnnounceTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	primary := func(p int) (string, uint64) {
		best, epoch := "", uint64(0)
		for _, pi := range c.Partitions() {
			for _, r := range pi.Replicas {
				if pi.Service == "kv" && pi.Partition == p && r.Role == "primary" && r.Epoch >= epoch {
					best, epoch = r.Node, r.Epoch
				}
			}
		}
		return best, epoch
	}
	browserWaitUntil(t, 20*time.Second, "every kv partition has a primary", func() bool {
		for p := range 4 {
			if n, _ := primary(p); n == "" {
				return false
			}
		}
		return true
	})
	victim, _ := primary(0)
	viewer := "d1"
	for _, id := range []string{"d1", "d2", "d3"} {
		if id != victim {
			viewer = id
			break
		}
	}
	gwDash := startBrowserGateway(t, ctx, bin, dir, cl)

	// Traffic: writes and reads on kv, classed calls on echo, requests
	// through the gateway, until the test ends.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopLoad(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		hc := &http.Client{Timeout: time.Second}
		for i := 0; loadCtx.Err() == nil; i++ {
			cctx, cancel := context.WithTimeout(loadCtx, time.Second)
			_, _ = c.Call(cctx, "kv", i%4, "put", fmt.Appendf(nil, "k%d=v", i))
			_, _ = c.Call(cctx, "kv", i%4, "get", fmt.Appendf(nil, "k%d", i))
			_, _ = c.Call(cctx, "echo", 0, "echo", []byte("hi"), neptune.WithClass([]string{"gold", "bronze"}[i%2]))
			if i%5 == 0 {
				_, _ = c.Aggregate(cctx, neptune.Aggregation{Service: "search", Partitions: []int{0, 1, 2}, Local: "topk", Reduce: "merge",
					LocalParams: []byte(`{"terms":[1,2],"k":5}`), ReduceParams: []byte("5"), Quality: 0.5, Deadline: 300 * time.Millisecond})
			}
			cancel()
			if req, err := http.NewRequestWithContext(loadCtx, http.MethodGet, "http://"+gwDash.http+"/kv/0/", strings.NewReader("k1")); err == nil {
				req.Host = []string{"shop.example", "other.example"}[i%2]
				if resp, err := hc.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// The browser, with every console error and uncaught exception kept.
	// The cluster is secured: its dashboards are HTTPS under the
	// cluster CA, which this throwaway browser profile does not trust.
	actx, cancelA := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1280, 860), chromedp.IgnoreCertErrors)...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	if err := chromedp.Do(bctx); err != nil { // start the browser and open the tab
		t.Fatal(err)
	}
	var mu sync.Mutex
	var consoleErrs []string
	consoleCtx, stopConsole := context.WithCancel(bctx)
	defer stopConsole()
	go func() {
		for m, err := range chromedp.Console(consoleCtx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				consoleErrs = append(consoleErrs, m.String())
				mu.Unlock()
			}
		}
	}()
	checkConsole := func(where string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(consoleErrs) > 0 {
			t.Errorf("%s: console errors: %q", where, consoleErrs)
			consoleErrs = nil
		}
	}
	base := "https://" + dash[viewer]
	shots := os.Getenv("NEPTUNE_SCREENSHOTS") != ""
	shot := func(name string) {
		t.Helper()
		if !shots {
			return
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		out := filepath.Join("..", "docs", "figures", "dashboard", name+".png")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", out, len(png))
	}
	text := func(sel string) string {
		t.Helper()
		// One evaluation in the page: the live script may swap the content
		// between a node query and a read of its text.
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ""`, sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	// waitPage polls the live page (the script swaps the content in every
	// second) until cond holds.
	waitPage := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		browserWaitUntil(t, d, what, cond)
	}
	open := func(url string) {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#view .stamp"))); err != nil {
			t.Fatalf("open %s: %v", url, err)
		}
	}

	// The dashboard wants an operator: plain HTTP is refused, and so is
	// HTTPS without an identity, in Go and in the browser.
	for _, u := range []string{"http://" + dash[viewer] + "/cluster", "http://" + dash[viewer] + "/metrics"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("plain GET %s: %s, want 403", u, resp.Status)
		}
	}
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, u := range []string{base + "/cluster", base + "/api/dashboard/cluster", base + "/metrics", "https://" + gwDash.metrics + "/subscribers"} {
		resp, err := anon.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without identity: %s, want 401", u, resp.Status)
		}
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/cluster")); err != nil {
		t.Fatal(err)
	}
	if body := text("body"); !strings.Contains(body, "unauthenticated") {
		t.Errorf("the browser without an identity got %q, want the 401 page", body)
	}
	// The refusals the console logged (the page's and its favicon's) were
	// the point; the views below must log none.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	consoleErrs = nil
	mu.Unlock()
	// The operator's token (neptune tls token create --operator), sent
	// with every request of the page, its live refreshes included.
	ca, err := pki.LoadCA(cl.PKIDir())
	if err != nil {
		t.Fatal(err)
	}
	token, err := ca.IssueToken(pki.Identity{Role: pki.RoleOperator, Name: "operator"}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + token}}); err != nil {
		t.Fatal(err)
	}

	// Every view loads and shows its data.
	open(base + "/cluster")
	if n := count(`tr.member[data-state="alive"]`); n != 3 {
		t.Errorf("cluster: %d alive members, want 3", n)
	}
	if s := text("#self"); s != viewer {
		t.Errorf("viewed from %q, want %q", s, viewer)
	}
	open(base + "/partitions")
	if n := count("tr.partition"); n != 4 {
		t.Errorf("partitions: %d rows, want 4", n)
	}
	open(base + "/traffic")
	waitPage("traffic shows calls/s", 10*time.Second, func() bool {
		return strings.Contains(text("#view"), "put") && strings.Contains(text("h2"), "rates over")
	})
	shot("traffic")
	open(base + "/classes")
	waitPage("classes shows gold and bronze", 10*time.Second, func() bool {
		v := text("#classes")
		return strings.Contains(v, "gold") && strings.Contains(v, "bronze")
	})
	shot("classes")
	// The aggregations the client makes are rooted at one node or another:
	// the first node whose page shows search calls rooted there.
	var rootedAt string
	waitPage("a node shows search aggregations rooted there", 15*time.Second, func() bool {
		for _, id := range []string{"d1", "d2", "d3"} {
			open("https://" + dash[id] + "/aggregation")
			if count(`#aggregation-rooted tr[data-service="search"]`) == 1 {
				rootedAt = id
				return true
			}
		}
		return false
	})
	t.Logf("search aggregations rooted at %s: %s", rootedAt, text(`#aggregation-rooted tr[data-service="search"]`))
	shot("aggregation")
	open("https://" + gwDash.metrics + "/subscribers")
	var heading string
	waitPage("subscribers shows what shop was served (a rate window)", 10*time.Second, func() bool {
		heading = text("h2")
		return strings.Contains(text("#subscribers"), "shop") && strings.Contains(heading, "served over the last")
	})
	shot("subscribers")
	checkConsole("views")

	// Filters: query parameters, and the form.
	open(base + "/partitions?service=kv&partition=2")
	if n, m := count("tr.partition"), count(`tr.partition[data-partition="2"]`); n != 1 || m != 1 {
		t.Errorf("partition filter: %d rows, %d of partition 2", n, m)
	}
	open(base + "/cluster")
	if err := chromedp.Do(bctx, chromedp.SendKeys(chromedp.CSS("#f-node"), viewer), chromedp.Click(chromedp.CSS("#f-apply")),
		chromedp.WaitVisible(chromedp.CSS("#view .stamp"))); err != nil {
		t.Fatal(err)
	}
	waitPage("node filter applied", 5*time.Second, func() bool { return count("tr.member") == 1 })
	if n := count(fmt.Sprintf(`tr.member[data-node=%q]`, viewer)); n != 1 {
		t.Errorf("node filter from the form: %d rows of %s", n, viewer)
	}
	href, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS("#nav-partitions"), "href"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(href.Value, "node="+viewer) {
		t.Errorf("navigation drops the filter: %s", href.Value)
	}
	checkConsole("filters")

	// Kill partition 0's primary: on the open Cluster page it greys out,
	// then Partitions shows a new primary with a higher epoch.
	open(base + "/cluster")
	_, e0 := primary(0)
	killed := time.Now()
	if err := nodes[victim].Kill(); err != nil {
		t.Fatal(err)
	}
	waitPage(victim+" greys out", 10*time.Second, func() bool {
		return count(fmt.Sprintf(`tr.member.dead[data-node=%q]`, victim)) == 1
	})
	greyed := time.Since(killed)
	t.Logf("%s greyed out on the open page %v after SIGKILL (TTL 1s, page refresh 1s)", victim, greyed.Round(10*time.Millisecond))
	// Gone from the yellow pages within the TTL, on the page at the next
	// refresh: 2 s, with room for a busy machine.
	if greyed > 5*time.Second {
		t.Errorf("%s greyed out %v after SIGKILL, want within TTL + refresh (2 s) and some slack", victim, greyed)
	}
	// A dashboard first opened after the death still shows the dead node,
	// from its yellow pages' memory of departed members.
	fresh := ""
	for _, id := range []string{"d1", "d2", "d3"} {
		if id != victim && id != viewer {
			fresh = id
		}
	}
	open("https://" + dash[fresh] + "/cluster")
	if n := count(fmt.Sprintf(`tr.member.dead[data-node=%q] .lastseen`, victim)); n != 1 {
		t.Errorf("a dashboard opened on %s after %s died does not show it dead with when it was last seen", fresh, victim)
	}
	t.Logf("fresh dashboard on %s: %s", fresh, text(fmt.Sprintf(`tr.member.dead[data-node=%q]`, victim)))
	shot("cluster")
	open(base + "/partitions?service=kv")
	var newPrimary, newEpoch string
	waitPage("partition 0 has a new primary", 20*time.Second, func() bool {
		attrs, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]string](
			`Object.assign({}, (document.querySelector('tr.partition[data-partition="0"]') || {dataset: {}}).dataset)`))
		if err != nil {
			return false
		}
		newPrimary, newEpoch = attrs["primary"], attrs["epoch"]
		e, _ := strconv.ParseUint(newEpoch, 10, 64)
		return newPrimary != "" && newPrimary != victim && e > e0
	})
	t.Logf("partition 0: primary %s epoch %d -> %s epoch %s, %v after SIGKILL", victim, e0, newPrimary, newEpoch, time.Since(killed).Round(10*time.Millisecond))
	if n := count(fmt.Sprintf(`tr.partition[data-partition="0"] .rep.gone[data-node=%q]`, victim)); n != 1 {
		t.Errorf("partition 0 does not show %s's replica as gone", victim)
	}
	shot("partitions")
	checkConsole("failover")
	t.Logf("browser test took %v", time.Since(started).Round(100*time.Millisecond))
}

type browserGatewayAddrs struct{ http, metrics string }

var browserGatewayUp = regexp.MustCompile(`gateway up: http (\S+), metrics (\S+),`)

// startBrowserGateway runs `neptune gateway` with two subscribers in front of kv.
func startBrowserGateway(t *testing.T, ctx context.Context, bin, dir string, cl *localcluster.Cluster) browserGatewayAddrs {
	t.Helper()
	path := filepath.Join(dir, "gw.yaml")
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
metrics: 127.0.0.1:0
join: [%s]
capacity_grps: 200
subscribers:
  - {name: shop, reservation: 120, rules: [{host: shop.example}]}
  - {name: partner, reservation: 50, limit: 100, rules: [{host: partner.example}]}
routes:
  - {path_prefix: /kv/, methods: [GET], service: kv, method: get}
`, strings.Join(cl.Seeds(), ", "))
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"gateway", "--config", path}, cl.SecurityArgs("client/client")...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logf, _ := os.Create(filepath.Join(dir, "gw.log"))
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	up := make(chan browserGatewayAddrs, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := browserGatewayUp.FindStringSubmatch(sc.Text()); m != nil {
				up <- browserGatewayAddrs{http: m[1], metrics: m[2]}
			}
		}
	}()
	select {
	case a := <-up:
		return a
	case <-time.After(15 * time.Second):
		b, _ := os.ReadFile(filepath.Join(dir, "gw.log"))
		t.Fatalf("gateway not up after 15s:\n%s", b)
	}
	return browserGatewayAddrs{}
}

func browserWaitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
