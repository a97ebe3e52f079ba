package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// route is a Route ready to match.
type route struct {
	Route
	field   string // "routes[i]", for logs
	host    string // exact host, or "" for any
	suffix  string // ".example.com" for a wildcard host
	prefix  string
	methods []string        // nil: any
	subs    map[string]bool // nil: any subscriber
	timeout time.Duration
}

// routeTable holds the routes most specific first (see Route).
type routeTable struct {
	list []*route
}

// newRouteTable builds the table from validated routes.
func newRouteTable(rs []Route, timeout time.Duration) *routeTable {
	t := &routeTable{}
	for i, r := range rs {
		h, _ := normalizeRouteHost(r.Host) // validated
		e := &route{Route: r, field: fmt.Sprintf("routes[%d]", i), prefix: r.PathPrefix, timeout: timeout}
		if strings.HasPrefix(h, "*.") {
			e.suffix = h[1:]
		} else {
			e.host = h
		}
		if len(r.Methods) > 0 {
			e.methods = r.Methods
		}
		if len(r.Subscribers) > 0 {
			e.subs = map[string]bool{}
			for _, s := range r.Subscribers {
				e.subs[s] = true
			}
		}
		if r.Timeout > 0 {
			e.timeout = time.Duration(r.Timeout)
		}
		t.list = append(t.list, e)
	}
	kind := func(r *route) int {
		switch {
		case r.host != "":
			return 2
		case r.suffix != "":
			return 1
		}
		return 0
	}
	slices.SortStableFunc(t.list, func(a, b *route) int {
		return cmp.Or(
			cmp.Compare(kind(b), kind(a)),
			cmp.Compare(len(b.suffix), len(a.suffix)),
			cmp.Compare(len(b.prefix), len(a.prefix)),
			cmp.Compare(min(len(b.methods), 1), min(len(a.methods), 1)),
		)
	})
	return t
}

// match returns the most specific route for host, path and method. With
// none, allow lists the methods routes for host and path take (the
// request deserves 405 Method Not Allowed if there are some, 404 if not).
func (t *routeTable) match(host, path, method string) (r *route, allow []string) {
	h := normalizeHost(host)
	for _, e := range t.list {
		if !e.matchHost(h) || !pathHasPrefix(path, e.prefix) {
			continue
		}
		if e.methods == nil || slices.Contains(e.methods, method) ||
			(method == http.MethodHead && slices.Contains(e.methods, http.MethodGet)) {
			return e, nil
		}
		for _, m := range e.methods {
			if !slices.Contains(allow, m) {
				allow = append(allow, m)
			}
		}
	}
	slices.Sort(allow)
	return nil, allow
}

func (e *route) matchHost(h string) bool {
	switch {
	case e.host != "":
		return h == e.host
	case e.suffix != "":
		return len(h) > len(e.suffix) && strings.HasSuffix(h, e.suffix)
	}
	return true
}

// allows reports whether the route serves subscriber sub.
func (e *route) allows(sub string) bool { return e.subs == nil || e.subs[sub] }

func normalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// pathHasPrefix matches on a segment boundary, as gage's path rules do.
func pathHasPrefix(path, prefix string) bool {
	if prefix == "" || prefix == "/" {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}

// errBadKey is a request whose partition key is missing or malformed, or
// whose affinity key is malformed: the client's mistake, answered 400.
var errBadKey = errors.New("bad key")

// maxPartition is the largest partition number a call carries (int32 on
// the wire).
const maxPartition = math.MaxInt32

// partition reads r's partition as p says; errors wrap errBadKey and say
// what was wrong, never echoing more of the key than a short prefix.
func (p PartitionSpec) partition(r *http.Request) (int, error) {
	if p.Fixed != nil {
		return *p.Fixed, nil
	}
	v, what, err := readKey(r, p.Segment, p.Header, p.Query)
	switch {
	case err != nil:
		return 0, err
	case what == "":
		return 0, nil
	case v == "":
		return 0, fmt.Errorf("%w: %s is missing or empty", errBadKey, what)
	}
	if p.Hash {
		h := fnv.New64a()
		h.Write([]byte(v))
		return int(h.Sum64() % uint64(p.Count)), nil
	}
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil || v[0] == '+' || n > maxPartition {
		return 0, fmt.Errorf("%w: %s %q is not a partition number", errBadKey, what, short(v))
	}
	if p.Count > 0 && int(n) >= p.Count {
		return 0, fmt.Errorf("%w: %s: partition %d is not below %d", errBadKey, what, n, p.Count)
	}
	return int(n), nil
}

// key reads r's affinity key as a says: "" if the route names none or
// the request lacks it (balanced as any); a key given twice or badly
// escaped is the client's mistake.
func (a AffinitySpec) key(r *http.Request) (string, error) {
	v, _, err := readKey(r, a.Segment, a.Header, a.Query)
	return v, err
}

// readKey reads the value of the path segment (1-based), header or query
// parameter set (the first of them), and what it read for errors ("" if
// none is set). A missing value (a path too short included) is "".
func readKey(r *http.Request, segment int, header, query string) (v, what string, err error) {
	switch {
	case segment > 0:
		what = fmt.Sprintf("path segment %d", segment)
		segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
		if segment > len(segs) {
			return "", what, nil
		}
		s, err := url.PathUnescape(segs[segment-1])
		if err != nil {
			return "", what, fmt.Errorf("%w: %s is not validly escaped", errBadKey, what)
		}
		return s, what, nil
	case header != "":
		what = "header " + header
		vs := r.Header.Values(header)
		if len(vs) > 1 {
			return "", what, fmt.Errorf("%w: %s is given %d times", errBadKey, what, len(vs))
		}
		if len(vs) == 1 {
			v = vs[0]
		}
		return v, what, nil
	case query != "":
		what = "query parameter " + query
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return "", what, fmt.Errorf("%w: the query is not validly escaped", errBadKey)
		}
		vs := q[query]
		if len(vs) > 1 {
			return "", what, fmt.Errorf("%w: %s is given %d times", errBadKey, what, len(vs))
		}
		if len(vs) == 1 {
			v = vs[0]
		}
		return v, what, nil
	}
	return "", "", nil
}

// short keeps error messages from echoing long client input.
func short(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
