package gage

import (
	"errors"
	"strings"
	"testing"
)

func classifierCfg() Config {
	return Config{Subscribers: []Subscriber{
		{Name: "ibm", Reservation: 100, Rules: []Rule{{Host: "www.IBM.com"}}},
		{Name: "ibm-api", Reservation: 50, Rules: []Rule{{Host: "www.ibm.com", PathPrefix: "/api"}}},
		{Name: "shop", Reservation: 10, Rules: []Rule{{Host: "*.shop.example"}}},
		{Name: "eu-shop", Reservation: 10, Rules: []Rule{{Host: "*.eu.shop.example"}}},
		{Name: "static", Rules: []Rule{{PathPrefix: "/static/"}}},
		{Name: "keyed", Reservation: 5, APIKeys: []string{HashKey("s3cret")}},
	}}
}

func TestClassifyPrecedence(t *testing.T) {
	c, err := NewClassifier(classifierCfg())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ host, path, key, want string }{
		{"www.ibm.com", "/", "", "ibm"},
		{"WWW.IBM.COM:8080", "/index.html", "", "ibm"},
		{"www.ibm.com.", "/api", "", "ibm-api"},     // exact host, longer prefix
		{"www.ibm.com", "/api/v1/x", "", "ibm-api"}, // segment boundary
		{"www.ibm.com", "/apis", "", "ibm"},         // not a segment of /api
		{"www.ibm.com", "/static/a.png", "", "ibm"}, // exact host beats path-only rule
		{"a.shop.example", "/", "", "shop"},         // wildcard
		{"x.eu.shop.example", "/", "", "eu-shop"},   // longer wildcard wins
		{"shop.example", "/", "", DefaultName},      // wildcard excludes the apex
		{"other.org", "/static/x", "", "static"},    // path-only
		{"other.org", "/", "", DefaultName},         // nothing matches
		{"www.ibm.com", "/", "s3cret", "keyed"},     // the key names who pays
		{"[::1]:80", "/static/", "", "static"},      // IPv6 host with port
	} {
		got, err := c.Classify(tc.host, tc.path, tc.key)
		if err != nil || got != tc.want {
			t.Errorf("Classify(%q, %q, %q) = %q, %v; want %q", tc.host, tc.path, tc.key, got, err, tc.want)
		}
	}
	if _, err := c.Classify("www.ibm.com", "/", "wrong"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown key: %v, want ErrUnknownKey", err)
	}
}

func TestValidateNamesFields(t *testing.T) {
	cfg := Config{Subscribers: []Subscriber{
		{Name: "a", Reservation: 10, Rules: []Rule{{Host: "a.com"}}},
		{Name: "a", Reservation: 5},
		{Name: "c", Reservation: -1},
		{Name: "d", Reservation: 20, Limit: 10},
		{Name: "e", Rules: []Rule{{}, {Host: "a.com"}, {Host: "bad/host"}, {PathPrefix: "nope"}}},
		{Name: "f", APIKeys: []string{"s3cret", HashKey("k"), HashKey("k")}},
		{Name: DefaultName, Reservation: 3},
		{Name: "has space"},
	}}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, field := range []string{
		"subscribers[1].name", "subscribers[2].reservation", "subscribers[3].limit",
		"subscribers[4].rules[0]", "subscribers[4].rules[1]", "subscribers[4].rules[2].host",
		"subscribers[4].rules[3].path_prefix", "subscribers[5].api_keys[0]", "subscribers[5].api_keys[2]",
		"subscribers[6].reservation", "subscribers[7].name",
	} {
		if !strings.Contains(err.Error(), field+": ") {
			t.Errorf("no error names %s in:\n%v", field, err)
		}
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Errorf("errors are not *FieldError: %T", err)
	}
	if err := classifierCfg().Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
	if _, err := NewCredit(cfg, Options{}); err == nil {
		t.Error("scheduler built from an invalid config")
	}
}

func TestConfigAllAddsDefault(t *testing.T) {
	all := subs("a", 1.0).All()
	if len(all) != 2 || all[1].Name != DefaultName || all[1].Reservation != 0 {
		t.Errorf("All() = %+v", all)
	}
	cfg := Config{Subscribers: []Subscriber{{Name: DefaultName, Limit: 5}}}
	if all := cfg.All(); len(all) != 1 || all[0].Limit != 5 {
		t.Errorf("listed default replaced: %+v", all)
	}
}

// The classifier never panics, always answers a configured subscriber or
// ErrUnknownKey, and answers the same twice.
func FuzzClassify(f *testing.F) {
	c, err := NewClassifier(classifierCfg())
	if err != nil {
		f.Fatal(err)
	}
	known := map[string]bool{DefaultName: true}
	for _, s := range classifierCfg().Subscribers {
		known[s.Name] = true
	}
	f.Add("www.ibm.com", "/api/x", "")
	f.Add("[::1]:80", "/static/", "s3cret")
	f.Add("a.shop.example.", "", "")
	f.Fuzz(func(t *testing.T, host, path, key string) {
		got, err := c.Classify(host, path, key)
		again, err2 := c.Classify(host, path, key)
		if got != again || (err == nil) != (err2 == nil) {
			t.Fatalf("not deterministic")
		}
		if err != nil {
			if !errors.Is(err, ErrUnknownKey) || key == "" {
				t.Fatalf("error %v for key %q", err, key)
			}
			return
		}
		if !known[got] {
			t.Fatalf("unknown subscriber %q", got)
		}
	})
}

// Rule parsing never panics and accepts only what it can normalise.
func FuzzRuleValidate(f *testing.F) {
	f.Add("*.example.com", "/api")
	f.Add("", "/")
	f.Add("a..b", "x")
	f.Fuzz(func(t *testing.T, host, prefix string) {
		cfg := Config{Subscribers: []Subscriber{{Name: "s", Rules: []Rule{{Host: host, PathPrefix: prefix}}}}}
		if err := cfg.Validate(); err != nil {
			return
		}
		c, err := NewClassifier(cfg)
		if err != nil {
			t.Fatalf("valid config refused by the classifier: %v", err)
		}
		if host != "" && !strings.HasPrefix(host, "*.") {
			got, _ := c.Classify(host, prefix, "")
			if got != "s" {
				t.Fatalf("rule {%q %q} does not match its own host and prefix (got %q)", host, prefix, got)
			}
		}
	})
}
