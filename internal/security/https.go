package security

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/pki"
)

// A member's HTTP listener (dashboard, its JSON, /metrics, probes) is
// secured like its RPC port: on a secured cluster every path but the
// open ones (the probes) is served over TLS with the member's
// certificate, to a caller that shows an identity the path admits: a
// client certificate from the cluster CA or a bearer token it signed and
// did not revoke (pki.Source.VerifyToken), as a header or a browser's
// cookie (TokenParam).
// Plain HTTP on the same port reaches only the open
// paths, so kubelet and compose health checks keep working unchanged.

// Access says which identities may use a path.
type Access struct {
	// Open paths need no identity and are served over plain HTTP too.
	Open bool
	// Roles may use the path (over TLS); empty with Open false: nobody.
	Roles []pki.Role
}

// HTTPGuard wraps h so each request needs what access(r) says. On an
// insecure member everything is served as is.
func (m *Material) HTTPGuard(h http.Handler, access func(*http.Request) Access) http.Handler {
	if m.Insecure() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := access(r)
		if a.Open {
			h.ServeHTTP(w, r)
			return
		}
		if r.TLS == nil {
			http.Error(w, "this cluster is secured: use https:// with an operator or scraper identity", http.StatusForbidden)
			return
		}
		if tok := r.URL.Query().Get(TokenParam); tok != "" {
			m.tokenLogin(w, r, tok)
			return
		}
		id, err := m.httpIdentity(r)
		if err != nil {
			m.Refusals.Refuse("http_unauthenticated", remoteHost(r), err)
			w.Header().Set("WWW-Authenticate", `Bearer realm="neptune"`)
			if errors.Is(err, pki.ErrTokenRevoked) {
				http.Error(w, "unauthenticated: "+err.Error()+"; ask for a new token", http.StatusUnauthorized)
				return
			}
			http.Error(w, "unauthenticated: present a client certificate or a bearer token from the cluster CA (neptune tls token create): "+err.Error(), http.StatusUnauthorized)
			return
		}
		if !slices.Contains(a.Roles, id.Role) {
			m.Refusals.Refuse("http_forbidden", id.String(), fmt.Errorf("%s may not use %s", id, r.URL.Path))
			http.Error(w, fmt.Sprintf("forbidden: %s may not use %s", id, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// MemberAccess is the rule of a member's HTTP listener: the probes
// (/livez, /healthz, /readyz) are open, plain HTTP too, for kubelet and
// compose; /metrics admits scrapers and operators; peerPaths (what
// members read of each other, such as a dashboard's self status) admit
// nodes, gateways and operators; every other path (the dashboard, its
// JSON, pprof) operators only.
func MemberAccess(peerPaths ...string) func(*http.Request) Access {
	return func(r *http.Request) Access {
		switch p := r.URL.Path; {
		case p == "/livez" || p == "/healthz" || p == "/readyz":
			return Access{Open: true}
		case p == "/metrics":
			return Access{Roles: []pki.Role{pki.RoleScraper, pki.RoleOperator}}
		case slices.Contains(peerPaths, p):
			return Access{Roles: []pki.Role{pki.RoleOperator, pki.RoleNode, pki.RoleGateway}}
		}
		return Access{Roles: []pki.Role{pki.RoleOperator}}
	}
}

// PeerHTTPClient is the client a member reads its peers' HTTP listeners
// with (their peerPaths): it presents the member's certificate and
// accepts only a node's. Nil on an insecure member.
func (m *Material) PeerHTTPClient() *http.Client {
	if m.Insecure() {
		return nil
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: m.TLS.ClientConfig(""), IdleConnTimeout: 5 * time.Second, MaxIdleConnsPerHost: 1}}
}

// TokenParam and TokenCookie let a browser use a token: a link with
// ?token=<jwt> (neptune demo prints one) stores it in a cookie, for the
// page and its live refreshes, and redirects to the link without it.
const (
	TokenParam  = "token"
	TokenCookie = "neptune_token"
)

// tokenLogin checks a token given in the URL and, if valid, keeps it in
// a cookie (secure, HTTP only, same site, expiring with the token) and
// redirects to the URL without it, so it does not stay in the history.
func (m *Material) tokenLogin(w http.ResponseWriter, r *http.Request, tok string) {
	t, err := m.TLS.VerifyToken(tok)
	if err != nil {
		m.Refusals.Refuse("http_unauthenticated", remoteHost(r), err)
		http.Error(w, "unauthenticated: "+err.Error(), http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: tok, Path: "/", Expires: t.Expires, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	u := *r.URL
	q := u.Query()
	q.Del(TokenParam)
	u.RawQuery = q.Encode()
	m.log.Info("http: token accepted for a browser session", "identity", t.Identity.String(), "token", t.ID, "source", remoteHost(r))
	http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
}

// errNoIdentity: neither a certificate nor a token came with the request.
var errNoIdentity = errors.New("no client certificate and no bearer token")

// httpIdentity is who the request comes from: its verified client
// certificate, else its bearer token.
func (m *Material) httpIdentity(r *http.Request) (pki.Identity, error) {
	if len(r.TLS.VerifiedChains) > 0 {
		return pki.PeerIdentity(*r.TLS)
	}
	auth := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		c, err := r.Cookie(TokenCookie)
		if err != nil || c.Value == "" {
			return pki.Identity{}, errNoIdentity
		}
		token = c.Value
	}
	t, err := m.TLS.VerifyToken(strings.TrimSpace(token))
	return t.Identity, err
}

// HTTPListener returns ln as the member's HTTP listener: on a secured
// member a connection that opens with a TLS handshake is served over TLS
// with the member's certificate, one that does not as plain HTTP (the
// guard lets it reach only open paths). An insecure member's is ln.
func (m *Material) HTTPListener(ln net.Listener) net.Listener {
	if m.Insecure() {
		return ln
	}
	s := &sniffListener{Listener: ln, tls: m.TLS.HTTPSConfig(), conns: make(chan net.Conn), done: make(chan struct{})}
	go s.accept()
	return s
}

// sniffWait bounds how long a connection may take to send its first
// byte before it is dropped.
const sniffWait = 10 * time.Second

// sniffListener tells TLS from plain HTTP by the first byte (a TLS
// record of type handshake, 0x16; no HTTP method starts with it). Each
// connection is sniffed in its own goroutine, so a silent one holds up
// no other.
type sniffListener struct {
	net.Listener
	tls   *tls.Config
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error // set once, before done is closed
}

func (s *sniffListener) accept() {
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			s.fail(err)
			return
		}
		go s.sniff(c)
	}
}

func (s *sniffListener) sniff(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(sniffWait))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	var out net.Conn = &peekedConn{Conn: c, r: br}
	if first[0] == 0x16 {
		out = tls.Server(out, s.tls)
	}
	select {
	case s.conns <- out:
	case <-s.done:
		c.Close()
	}
}

func (s *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, s.err
	}
}

func (s *sniffListener) Close() error {
	err := s.Listener.Close()
	s.fail(net.ErrClosed)
	return err
}

// fail ends Accept with err (the first one wins).
func (s *sniffListener) fail(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
	})
}

// peekedConn reads first what the sniff buffered.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
