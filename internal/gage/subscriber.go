package gage

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
)

// DefaultName is the subscriber that unclassified traffic goes to. It has
// no reservation: it is served from spare capacity only, so traffic nobody
// pays for cannot take what subscribers were promised.
const DefaultName = "default"

// Subscriber is one paying tenant: what it was promised and how its
// requests are recognised.
type Subscriber struct {
	// Name identifies the subscriber in reports, metrics and usage.
	Name string `yaml:"name" json:"name"`
	// Reservation is the guaranteed rate in generic requests per second
	// (GRPS, §3.1), whatever the other subscribers send.
	Reservation float64 `yaml:"reservation" json:"reservation"`
	// Limit caps the rate in GRPS, spare capacity included; 0 means no
	// cap. Not in the paper: it lets an operator sell "up to" as well as
	// "at least".
	Limit float64 `yaml:"limit,omitempty" json:"limit,omitempty"`
	// Rules match requests by Host and path prefix.
	Rules []Rule `yaml:"rules,omitempty" json:"rules,omitempty"`
	// APIKeys are the lowercase hex SHA-256 digests (see HashKey) of the
	// keys that identify this subscriber. Only digests are stored, so a
	// leaked config does not leak keys.
	APIKeys []string `yaml:"api_keys,omitempty" json:"api_keys,omitempty"`
	// Class is the Neptune service class of this subscriber's calls
	// (dissertation §4.2.2: a class is what a client is owed), so the
	// nodes' class scheduler serves each subscriber by its class; empty
	// takes the route's.
	Class string `yaml:"class,omitempty" json:"class,omitempty"`
}

// Rule matches a request whose Host and path both match; an empty field
// matches anything, and at least one must be set.
type Rule struct {
	// Host is an exact host name ("www.example.com") or a wildcard over
	// its subdomains ("*.example.com", which does not match example.com
	// itself). Compared without port, case and trailing dot.
	Host string `yaml:"host,omitempty" json:"host,omitempty"`
	// PathPrefix matches the path on a segment boundary: "/api" matches
	// "/api" and "/api/x", not "/apis"; a prefix ending in "/" matches
	// anything under it.
	PathPrefix string `yaml:"path_prefix,omitempty" json:"path_prefix,omitempty"`
}

// Config is the subscriber table a gateway enforces.
type Config struct {
	// Unit is the generic request; zero means DefaultUnit.
	Unit Unit `yaml:"unit,omitempty" json:"unit,omitempty"`
	// Subscribers are the tenants. The default subscriber may be listed
	// (name "default", no rules, no keys, no reservation) to give it a
	// limit; otherwise it is implicit and unlimited.
	Subscribers []Subscriber `yaml:"subscribers" json:"subscribers"`
}

// FieldError is one problem in a Config, naming the field in the config's
// own spelling, such as "subscribers[2].reservation".
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// UnitOrDefault is the configured unit, or DefaultUnit if none is.
func (c Config) UnitOrDefault() Unit {
	if c.Unit == (Unit{}) {
		return DefaultUnit
	}
	return c.Unit
}

// Validate reports every problem in c at once (errors.Join of
// *FieldError), so an operator fixes a config in one pass.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	if c.Unit != (Unit{}) {
		if err := c.Unit.Validate(); err != nil {
			bad("unit", "%w", err)
		}
	}
	names := map[string]int{}
	rules := map[Rule]string{}  // normalised rule -> field that defined it
	keys := map[string]string{} // digest -> field that defined it
	for i, s := range c.Subscribers {
		f := fmt.Sprintf("subscribers[%d]", i)
		switch {
		case s.Name == "":
			bad(f+".name", "must not be empty")
		case strings.TrimSpace(s.Name) != s.Name || strings.ContainsAny(s.Name, " \t\n\"{},="):
			bad(f+".name", "%q must not contain spaces, quotes, braces, commas or '='", s.Name)
		default:
			if j, dup := names[s.Name]; dup {
				bad(f+".name", "%q already names subscribers[%d]", s.Name, j)
			} else {
				names[s.Name] = i
			}
		}
		if !finite(s.Reservation) || s.Reservation < 0 {
			bad(f+".reservation", "must be a finite number >= 0 GRPS, got %v", s.Reservation)
		}
		switch {
		case !finite(s.Limit) || s.Limit < 0:
			bad(f+".limit", "must be a finite number >= 0 GRPS (0: no limit), got %v", s.Limit)
		case s.Limit > 0 && s.Limit < s.Reservation:
			bad(f+".limit", "%v GRPS is below the reservation %v GRPS", s.Limit, s.Reservation)
		}
		if s.Name == DefaultName {
			if s.Reservation != 0 {
				bad(f+".reservation", "the %q subscriber takes unclassified traffic and has no reservation", DefaultName)
			}
			if len(s.Rules) > 0 || len(s.APIKeys) > 0 {
				bad(f, "the %q subscriber takes what no rule or key matches; it has none itself", DefaultName)
			}
		}
		for j, r := range s.Rules {
			rf := fmt.Sprintf("%s.rules[%d]", f, j)
			n, err := r.normalize()
			if err != nil {
				var fe *FieldError
				if errors.As(err, &fe) {
					fe.Field = rf + "." + fe.Field
					errs = append(errs, fe)
				} else {
					bad(rf, "%w", err)
				}
				continue
			}
			if prev, dup := rules[n]; dup {
				bad(rf, "same host and path prefix as %s", prev)
				continue
			}
			rules[n] = rf
		}
		for j, k := range s.APIKeys {
			kf := fmt.Sprintf("%s.api_keys[%d]", f, j)
			d, err := parseDigest(k)
			if err != nil {
				bad(kf, "%w", err)
				continue
			}
			if prev, dup := keys[string(d)]; dup {
				bad(kf, "same key as %s", prev)
				continue
			}
			keys[string(d)] = kf
		}
	}
	return errors.Join(errs...)
}

// All returns the subscribers with the default one appended if the config
// does not list it: the set every scheduler is built from.
func (c Config) All() []Subscriber {
	out := make([]Subscriber, 0, len(c.Subscribers)+1)
	hasDefault := false
	for _, s := range c.Subscribers {
		hasDefault = hasDefault || s.Name == DefaultName
		out = append(out, s)
	}
	if !hasDefault {
		out = append(out, Subscriber{Name: DefaultName})
	}
	return out
}

// TotalReservation is the sum of the reservations in GRPS.
func (c Config) TotalReservation() float64 {
	t := 0.0
	for _, s := range c.Subscribers {
		t += s.Reservation
	}
	return t
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// normalize returns r in the form the classifier compares, or why r is
// invalid (a *FieldError naming "host" or "path_prefix" when it is one of
// them).
func (r Rule) normalize() (Rule, error) {
	if r.Host == "" && r.PathPrefix == "" {
		return r, errors.New("needs a host, a path_prefix or both")
	}
	var n Rule
	if r.Host != "" {
		h := strings.TrimSuffix(strings.ToLower(r.Host), ".")
		name := strings.TrimPrefix(h, "*.")
		if name == "" || strings.ContainsAny(name, "*/:[] \t?#@") || strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
			return r, &FieldError{Field: "host", Err: fmt.Errorf("%q is not a host name or *.suffix wildcard", r.Host)}
		}
		n.Host = h
	}
	if r.PathPrefix != "" {
		if !strings.HasPrefix(r.PathPrefix, "/") || strings.ContainsAny(r.PathPrefix, "?# \t") {
			return r, &FieldError{Field: "path_prefix", Err: fmt.Errorf("%q must start with / and hold no query, fragment or space", r.PathPrefix)}
		}
		n.PathPrefix = r.PathPrefix
	}
	return n, nil
}

func parseDigest(k string) ([]byte, error) {
	d, err := hex.DecodeString(k)
	if err != nil || len(d) != 32 {
		return nil, errors.New("must be the 64-hex-digit SHA-256 of the key (see `neptune gateway hash-key`), not the key itself")
	}
	return d, nil
}
