package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/internal/gateway"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// gatewayProc is a `neptune gateway` child process.
type gatewayProc struct {
	cmd                 *exec.Cmd
	http, metrics, goss string
}

var gatewayUp = regexp.MustCompile(`gateway up: http (\S+), metrics (\S+), gossip (\S+) as`)

// outcome is one request of the load: who sent it, through which gateway,
// when, and the answer.
type outcome struct {
	sub, gw string
	at      time.Time
	code    int
}

// TestTwoGatewaysKeepReservationsAndSurviveAKill is issue 12's process
// test: two node processes hosting echo, two `neptune gateway` processes
// gossiping demand, three subscribers. The cluster is secured: each
// gateway presents its own gateway certificate (gateway/ga, gateway/gb)
// to the nodes and signs its demand datagrams with it (issue 15). The capacity is set to the sum of
// the reservations (no spare), and a request moves about 1,000 bytes (one
// GRU of unit {net: 1000}, as the nodes measure it), so what a subscriber
// gets is what the split of its reservation gives it:
//
//   - phase 1: gold sends 25 GRPS of its 30, 90% of it through gateway B;
//     silver 15 of 20, evenly; flood 100 against a reservation of 10.
//     Gold and silver are served in full, flood is dropped (429).
//   - B is SIGKILLed; all traffic goes to A. Gold's part at A was about
//     0.12 of 30 GRPS, under the 25 it now sends there, and there is no
//     spare: it is served in full only once A takes the whole reservation,
//     which it must do within the stated bound (peer_ttl 1s + one gossip
//     period). Requests sent after the bound (plus max_wait for those
//     queued across it) must all be served.
func TestTwoGatewaysKeepReservationsAndSurviveAKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node and gateway processes")
	}
	bin := neptuneBinary(t) // built before the clock starts
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	cl, err := localcluster.NewSecure(bin, dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, gw := range []string{"ga", "gb"} {
		if err := cl.Issue(pki.Identity{Role: pki.RoleGateway, Name: gw}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if _, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprint("n", i), Services: []string{"echo:0"},
			Args: []string{"--announce-interval", "200ms", "--announce-ttl", "2s"}}); err != nil {
			t.Fatal(err)
		}
	}
	const ttl, period = time.Second, 100 * time.Millisecond
	config := func(name, peers string) string {
		return fmt.Sprintf(`
name: %s
listen: 127.0.0.1:0
metrics: 127.0.0.1:0
gossip: 127.0.0.1:0
%s
peer_ttl: %v
gossip_period: %v
join: [%s]
unit: {net: 1000}
capacity_grps: 60
max_wait: 1s
subscribers:
  - {name: gold, reservation: 30, api_keys: [%s]}
  - {name: silver, reservation: 20, api_keys: [%s]}
  - {name: flood, reservation: 10, api_keys: [%s]}
routes: [{path_prefix: /echo, service: echo, method: echo}]
`, name, peers, ttl, period, strings.Join(cl.Seeds(), ", "), gage.HashKey("gold-key"), gage.HashKey("silver-key"), gage.HashKey("flood-key"))
	}
	a := startGateway(t, ctx, dir, "ga", config("ga", ""), cl.SecurityArgs("gateway/ga")...)
	b := startGateway(t, ctx, dir, "gb", config("gb", "peers: ["+a.goss+"]"), cl.SecurityArgs("gateway/gb")...)

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// The probes Kubernetes would use: live at once, ready once the
	// gateway sees a node to call.
	for _, path := range []string{"/livez", "/readyz"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := hc.Get("http://" + a.metrics + path)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("gateway %s: %v %v", path, resp, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	body := bytes.Repeat([]byte{'x'}, 480) // ~490 bytes each way: about one GRU
	// Ready: echo answers through both, and each gateway hears the other.
	for {
		okA, okB := false, false
		for _, g := range []*gatewayProc{a, b} {
			req, _ := http.NewRequest("POST", "http://"+g.http+"/echo", bytes.NewReader(body))
			req.Header.Set("X-API-Key", "gold-key")
			resp, err := hc.Do(req)
			st, serr := gatewayStatus(cl, g.metrics)
			ready := err == nil && resp.StatusCode == 200 && serr == nil && len(st.Gateways) == 2
			if err == nil {
				resp.Body.Close()
			}
			if g == a {
				okA = ready
			} else {
				okB = ready
			}
		}
		if okA && okB {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the gateways never served echo and heard each other")
		}
		time.Sleep(100 * time.Millisecond)
	}

	out := make(chan outcome, 1<<16)
	var wg sync.WaitGroup
	lctx, stopLoad := context.WithCancel(ctx)
	both := []string{a.http, b.http}
	load(lctx, &wg, hc, "gold", 25, both, []float64{0.1, 0.9}, body, out)
	load(lctx, &wg, hc, "silver", 15, both, []float64{0.5, 0.5}, body, out)
	load(lctx, &wg, hc, "flood", 50, both, []float64{0.5, 0.5}, body, out)
	load(lctx, &wg, hc, "flood", 50, both, []float64{0.5, 0.5}, body, out)
	time.Sleep(5 * time.Second)
	stA, _ := gatewayStatus(cl, a.metrics)
	stB, _ := gatewayStatus(cl, b.metrics)
	stopLoad()
	wg.Wait()
	phase1 := drain(out)
	// The first second is the demand estimates' warm-up.
	start := phase1[0].at
	for _, o := range phase1 {
		start = minTime(start, o.at)
	}
	check := func(what string, os []outcome, from time.Time, sub string, wantAll bool) {
		t.Helper()
		n, ok := 0, 0
		for _, o := range os {
			if o.sub == sub && !o.at.Before(from) {
				n++
				if o.code == 200 {
					ok++
				}
			}
		}
		switch {
		case n == 0:
			t.Errorf("%s: no request of %s", what, sub)
		case wantAll && ok != n:
			t.Errorf("%s: %s served %d of %d", what, sub, ok, n)
		case !wantAll && ok == n:
			t.Errorf("%s: %s (flooding) served all %d: nothing was held back", what, sub, n)
		}
		t.Logf("%s: %s served %d of %d", what, sub, ok, n)
	}
	check("phase 1", phase1, start.Add(time.Second), "gold", true)
	check("phase 1", phase1, start.Add(time.Second), "silver", true)
	check("phase 1", phase1, start.Add(time.Second), "flood", false)
	gold := map[string]gateway.SubscriberStatus{}
	for _, st := range []gateway.Status{stA, stB} {
		for _, s := range st.Subscribers {
			t.Logf("phase 1 at %s: %s share %.2f demand %.1f GRPS", st.Gateway, s.Name, s.Share, s.DemandGRPS)
			if s.Name == "gold" {
				gold[st.Gateway] = s
			}
		}
	}
	// Gold's split follows its demand: about 10% of it at ga. Judged
	// against the splitter's formula for the demands the gateways
	// measured (f/N + (1-f)·(d_a + max(R-D,0)/N)/max(D,R), f = 0.05,
	// N = 2, R = 30), not a fixed figure: on a loaded machine the load
	// falls short of 25 GRPS and the unused part of the reservation is
	// split evenly, which raises ga's share legitimately.
	dA, dB := gold["ga"].DemandGRPS, gold["gb"].DemandGRPS
	want := 0.05/2 + 0.95*(dA+max(30-dA-dB, 0)/2)/max(dA+dB, 30)
	if sa, sb := gold["ga"].Share, gold["gb"].Share; sa > want+0.1 || sa >= sb {
		t.Errorf("gold's share at ga is %.2f (gb %.2f) with demand %.1f of %.1f GRPS there; the split gives %.2f", sa, sb, dA, dA+dB, want)
	}

	// Kill B; everything goes through A.
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	lctx, stopLoad = context.WithCancel(ctx)
	only := []string{a.http}
	load(lctx, &wg, hc, "gold", 25, only, []float64{1}, body, out)
	load(lctx, &wg, hc, "silver", 15, only, []float64{1}, body, out)
	load(lctx, &wg, hc, "flood", 100, only, []float64{1}, body, out)
	// When does ga hold every whole reservation again?
	var whole time.Duration
	for whole == 0 && time.Since(killed) < 5*time.Second {
		time.Sleep(20 * time.Millisecond)
		st, err := gatewayStatus(cl, a.metrics)
		all := err == nil
		for _, s := range st.Subscribers {
			all = all && s.Share >= 0.999
		}
		if all {
			whole = time.Since(killed)
		}
	}
	time.Sleep(time.Until(killed.Add(5 * time.Second)))
	stA, _ = gatewayStatus(cl, a.metrics)
	stopLoad()
	wg.Wait()
	phase2 := drain(out)
	bound := ttl + period
	t.Logf("ga held the whole reservations %v after gb was killed (bound %v)", whole, bound)
	// The status is read every 20 ms and ga ticks every period: allow
	// both, and a loaded machine's scheduling, on top of the bound.
	switch {
	case whole == 0:
		t.Errorf("ga never took the whole reservations back")
	case whole > bound+300*time.Millisecond:
		t.Errorf("ga took the whole reservations back %v after the kill, over the bound %v", whole, bound)
	case whole < ttl-2*period:
		t.Errorf("ga took the whole reservations back %v after the kill, before peer_ttl %v: it would drop live peers too", whole, ttl)
	}
	if len(stA.Gateways) != 1 {
		t.Errorf("ga still counts gateways %v 5s after gb died", stA.Gateways)
	}
	for _, s := range stA.Subscribers {
		if s.Share < 0.999 {
			t.Errorf("ga's share of %s is %.3f 5s after gb died, want 1", s.Name, s.Share)
		}
	}
	// Requests sent after the bound, and after max_wait for those that
	// queued before it, must all be served.
	after := killed.Add(bound + time.Second)
	check("after the kill", phase2, after, "gold", true)
	check("after the kill", phase2, after, "silver", true)
	check("after the kill", phase2, after, "flood", false)
}
