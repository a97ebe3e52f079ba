package gage

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// ErrUnknownKey is returned by Classify for a request that presents an API
// key no subscriber holds. The gateway answers 401 rather than serving the
// request as the default subscriber: a caller who sends a key expects to be
// charged to it, and a typo should not silently lose its guarantee.
var ErrUnknownKey = errors.New("gage: unknown API key")

// HashKey is the digest stored in Subscriber.APIKeys for key.
func HashKey(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// Classifier maps a request to the subscriber that pays for it (§3.3). It
// is immutable once built, so a gateway may share it between goroutines and
// swap it whole on a config reload.
//
// Precedence, first match wins:
//
//  1. An API key, when the request presents one: it names who pays,
//     whatever site is called. A key nobody holds is ErrUnknownKey.
//  2. Host and path rules, the most specific first: an exact host beats a
//     wildcard host (a longer wildcard suffix beats a shorter one), which
//     beats a rule without host; among equal hosts the longest path prefix
//     wins. The Host is the paper's criterion (§3.3: virtual web hosting);
//     path prefixes let one host serve several tenants.
//  3. The default subscriber.
type Classifier struct {
	keys  []keyEntry             // all digests, scanned in full (see Classify)
	exact map[string][]ruleEntry // exact host -> its rules, longest prefix first
	wild  []ruleEntry            // wildcard hosts, most specific first
	any   []ruleEntry            // path-only rules, longest prefix first
}

type keyEntry struct {
	digest [sha256.Size]byte
	name   string
}

type ruleEntry struct {
	suffix string // for wildcards: ".example.com"
	prefix string
	name   string
}

// NewClassifier validates cfg and builds its classifier.
func NewClassifier(cfg Config) (*Classifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gage: classifier: %w", err)
	}
	c := &Classifier{exact: map[string][]ruleEntry{}}
	for _, s := range cfg.Subscribers {
		for _, k := range s.APIKeys {
			d, _ := parseDigest(k) // validated
			var e keyEntry
			copy(e.digest[:], d)
			e.name = s.Name
			c.keys = append(c.keys, e)
		}
		for _, r := range s.Rules {
			n, _ := r.normalize() // validated
			e := ruleEntry{prefix: n.PathPrefix, name: s.Name}
			switch {
			case n.Host == "":
				c.any = append(c.any, e)
			case strings.HasPrefix(n.Host, "*."):
				e.suffix = n.Host[1:]
				c.wild = append(c.wild, e)
			default:
				c.exact[n.Host] = append(c.exact[n.Host], e)
			}
		}
	}
	// Most specific first; stable, so config order breaks ties (which
	// validation rules out anyway).
	byPrefix := func(a, b ruleEntry) int { return cmp.Compare(len(b.prefix), len(a.prefix)) }
	for h := range c.exact {
		slices.SortStableFunc(c.exact[h], byPrefix)
	}
	slices.SortStableFunc(c.any, byPrefix)
	slices.SortStableFunc(c.wild, func(a, b ruleEntry) int {
		return cmp.Or(cmp.Compare(len(b.suffix), len(a.suffix)), byPrefix(a, b))
	})
	return c, nil
}

// Classify returns the subscriber of a request for host (the Host header,
// port allowed), path (the URL path) and key (the presented API key, ""
// if none).
//
// The key is hashed and compared with every stored digest in constant
// time, without stopping at a match, so the time taken says nothing about
// which digest, or how much of one, matched.
func (c *Classifier) Classify(host, path, key string) (string, error) {
	if key != "" {
		d := sha256.Sum256([]byte(key))
		found := -1
		for i := range c.keys {
			if subtle.ConstantTimeCompare(d[:], c.keys[i].digest[:]) == 1 {
				found = i
			}
		}
		if found < 0 {
			return "", ErrUnknownKey
		}
		return c.keys[found].name, nil
	}
	h := normalizeHost(host)
	for _, e := range c.exact[h] {
		if pathHasPrefix(path, e.prefix) {
			return e.name, nil
		}
	}
	for _, e := range c.wild {
		if strings.HasSuffix(h, e.suffix) && len(h) > len(e.suffix) && pathHasPrefix(path, e.prefix) {
			return e.name, nil
		}
	}
	for _, e := range c.any {
		if pathHasPrefix(path, e.prefix) {
			return e.name, nil
		}
	}
	return DefaultName, nil
}

func normalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func pathHasPrefix(path, prefix string) bool {
	if prefix == "" {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}
