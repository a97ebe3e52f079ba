package security

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/pki"
)

// TestHTTPListenerAdmitsOnlyTheRolesEachPathNeeds serves a member's HTTP
// listener on a secured cluster: probes answer plain HTTP and TLS
// without identity; /metrics and the dashboard refuse plain HTTP (403)
// and TLS without identity (401); an operator (certificate or token)
// reaches both, a scraper only /metrics; a token of another cluster's CA
// or an expired one is refused. An insecure member serves all as is.
func TestHTTPListenerAdmitsOnlyTheRolesEachPathNeeds(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	if err := Scratch(dir, "prod", "n1"); err != nil {
		t.Fatal(err)
	}
	if err := Scratch(other, "prod", "n1"); err != nil { // same name, another CA
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.IssueFiles(dir, pki.Identity{Role: pki.RoleScraper, Name: "prom"}, false, pki.IssueOptions{}); err != nil {
		t.Fatal(err)
	}
	otherCA, err := pki.LoadCA(other)
	if err != nil {
		t.Fatal(err)
	}
	node := load(t, dir, pki.Identity{Role: pki.RoleNode, Name: "n1"})
	mux := http.NewServeMux()
	for _, p := range []string{"/livez", "/metrics", "/cluster", "/api/dashboard/self"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served "+p) })
	}
	serve := func(m *Material) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: m.HTTPGuard(mux, MemberAccess("/api/dashboard/self")), ReadHeaderTimeout: time.Second}
		hl := m.HTTPListener(ln)
		go func() { _ = srv.Serve(hl) }()
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	addr := serve(node)

	client := func(id *pki.Identity) *http.Client {
		if id == nil { // TLS without a certificate, trusting the CA
			return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: load(t, dir, *id).TLS.HTTPSClientConfig()}}
	}
	get := func(hc *http.Client, url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	token := func(ca *pki.CA, id pki.Identity, validFor time.Duration, at time.Time) string {
		tok, err := ca.IssueToken(id, validFor, at)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	operator, scraper := pki.Identity{Role: pki.RoleOperator, Name: "operator"}, pki.Identity{Role: pki.RoleScraper, Name: "prom"}
	clientID := pki.Identity{Role: pki.RoleClient, Name: "client"}
	plain, anon := &http.Client{}, client(nil)
	now := time.Now()
	for _, tc := range []struct {
		what  string
		hc    *http.Client
		url   string
		token string
		code  int
	}{
		{"plain probe", plain, "http://" + addr + "/livez", "", 200},
		{"TLS probe without identity", anon, "https://" + addr + "/livez", "", 200},
		{"plain /metrics", plain, "http://" + addr + "/metrics", "", 403},
		{"plain dashboard", plain, "http://" + addr + "/cluster", "", 403},
		{"plain dashboard with a token", plain, "http://" + addr + "/cluster", token(ca, operator, time.Hour, now), 403},
		{"TLS /metrics without identity", anon, "https://" + addr + "/metrics", "", 401},
		{"TLS dashboard without identity", anon, "https://" + addr + "/cluster", "", 401},
		{"operator certificate, dashboard", client(&operator), "https://" + addr + "/cluster", "", 200},
		{"operator certificate, /metrics", client(&operator), "https://" + addr + "/metrics", "", 200},
		{"scraper certificate, /metrics", client(&scraper), "https://" + addr + "/metrics", "", 200},
		{"scraper certificate, dashboard", client(&scraper), "https://" + addr + "/cluster", "", 403},
		{"client certificate, /metrics", client(&clientID), "https://" + addr + "/metrics", "", 403},
		{"node certificate, a peer's self status", client(&pki.Identity{Role: pki.RoleNode, Name: "n1"}), "https://" + addr + "/api/dashboard/self", "", 200},
		{"operator token, dashboard", anon, "https://" + addr + "/cluster", token(ca, operator, time.Hour, now), 200},
		{"scraper token, /metrics", anon, "https://" + addr + "/metrics", token(ca, scraper, time.Hour, now), 200},
		{"scraper token, dashboard", anon, "https://" + addr + "/cluster", token(ca, scraper, time.Hour, now), 403},
		{"expired operator token", anon, "https://" + addr + "/cluster", token(ca, operator, time.Minute, now.Add(-time.Hour)), 401},
		{"another CA's operator token", anon, "https://" + addr + "/cluster", token(otherCA, operator, time.Hour, now), 401},
		{"a tampered token", anon, "https://" + addr + "/cluster", token(ca, scraper, time.Hour, now) + "x", 401},
		{"garbage bearer", anon, "https://" + addr + "/cluster", "nope", 401},
	} {
		code, body := get(tc.hc, tc.url, tc.token)
		if code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.what, code, strings.TrimSpace(body), tc.code)
		}
		if code == 200 && !strings.HasPrefix(body, "served ") {
			t.Errorf("%s: body %q", tc.what, body)
		}
	}
	if n := node.Refusals.Count("http_unauthenticated"); n < 6 {
		t.Errorf("%v unauthenticated refusals counted, want every 401 (6)", n)
	}

	// A browser: a link with ?token= keeps the token in a cookie and
	// redirects to the link without it; later pages need no token.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Transport: anon.Transport}
	resp, err := browser.Get("https://" + addr + "/cluster?token=" + token(ca, operator, time.Hour, now) + "&node=n1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "served /cluster" || resp.Request.URL.Query().Has("token") || resp.Request.URL.Query().Get("node") != "n1" {
		t.Errorf("token link: %d %q at %s, want the page without the token in its URL", resp.StatusCode, body, resp.Request.URL)
	}
	if code, _ := get(browser, "https://"+addr+"/cluster", ""); code != 200 {
		t.Errorf("the page after the token link: %d, want 200 from the cookie", code)
	}
	if code, _ := get(anon, "https://"+addr+"/cluster?token="+token(otherCA, operator, time.Hour, now), ""); code != 401 {
		t.Errorf("a link with another CA's token: %d, want 401", code)
	}

	// Revoked (its id in the revocation file, re-read): the browser's
	// cookie and the same token in a header are refused saying so; a
	// token not revoked still opens the page.
	cookies := jar.Cookies(resp.Request.URL)
	if len(cookies) != 1 {
		t.Fatalf("browser cookies %v, want the token's", cookies)
	}
	revoked, err := pki.InspectToken(cookies[0].Value, []*x509.Certificate{ca.Cert})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Revoke(filepath.Join(dir, pki.RevokedTokensFile), pki.Revocation{ID: revoked.ID, Revoked: now}, now); err != nil {
		t.Fatal(err)
	}
	if err := node.TLS.Reload(); err != nil {
		t.Fatal(err)
	}
	for what, hc := range map[string]*http.Client{"cookie": browser, "header": anon} {
		tok := ""
		if hc == anon {
			tok = cookies[0].Value
		}
		if code, body := get(hc, "https://"+addr+"/cluster", tok); code != 401 || !strings.Contains(body, "was revoked") || !strings.Contains(body, revoked.ID) {
			t.Errorf("a revoked token in a %s: %d %q, want 401 saying it was revoked", what, code, strings.TrimSpace(body))
		}
	}
	if code, _ := get(anon, "https://"+addr+"/cluster", token(ca, operator, time.Hour, now)); code != 200 {
		t.Errorf("a token not revoked: %d, want 200", code)
	}

	// An insecure member keeps plain HTTP, open.
	open := serve(&Material{})
	if code, _ := get(plain, "http://"+open+"/cluster", ""); code != 200 {
		t.Errorf("insecure member's dashboard: %d, want 200", code)
	}
}
