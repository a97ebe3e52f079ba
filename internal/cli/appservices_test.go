package cli

import (
	"strings"
	"testing"
	"time"
)

func TestAppServiceConfig(t *testing.T) {
	const head = "id: n1\nservices:\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"forum", "  - {name: forum, partitions: 0-3, storage: /tmp/f.sqlite}\n", ""},
		{"auction in memory", "  - {name: auction, partitions: [0]}\n", ""},
		{"http", `  - name: py
    partitions: 0-1
    http:
      base_url: http://127.0.0.1:8080
      check_route: /check
      timeout: 2s
      methods: [{name: get, mode: read, route: /get}, {name: put, mode: write, route: /put, verb: PUT}]
`, ""},
		{"exec", `  - name: grep
    partitions: [0]
    exec: {command: grep, args: [-r, -f, /dev/stdin, .], data_dir: /tmp/g, timeout: 1s, ok_exit_codes: [0, 1], methods: [{name: search, mode: read}]}
`, ""},
		{"unknown service", "  - {name: blast, partitions: [0]}\n", "services[0].name: unknown service \"blast\""},
		{"http without base_url", "  - {name: py, partitions: [0], http: {methods: [{name: m, mode: read, route: /}]}}\n", "services[0].http.base_url is required"},
		{"http bad mode", "  - {name: py, partitions: [0], http: {base_url: 'http://h:1', methods: [{name: m, mode: rw, route: /}]}}\n", "services[0].http.methods[0].mode"},
		{"exec without data_dir", "  - {name: g, partitions: [0], exec: {command: grep, methods: [{name: m, mode: read}]}}\n", "services[0].exec.data_dir is required"},
		{"both", "  - {name: g, partitions: [0], http: {base_url: 'http://h:1'}, exec: {command: grep}}\n", "services[0]: set one of http and exec"},
		{"adapter shadows builtin", "  - {name: kv, partitions: [0], exec: {command: grep, data_dir: /tmp, methods: [{name: m, mode: read}]}}\n", "services[0].name: \"kv\" is a built-in"},
		{"storage on kv", "  - {name: kv, partitions: [0], storage: /tmp/x}\n", "services[0].storage is only for"},
		{"bad duration", "  - {name: g, partitions: [0], exec: {command: grep, data_dir: /tmp, timeout: soon, methods: [{name: m, mode: read}]}}\n", "soon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(head + tc.yaml))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q (config %+v)", err, tc.want, c)
			}
		})
	}
	c, err := ParseConfig([]byte(head + "  - {name: g, partitions: [0], exec: {command: grep, data_dir: /tmp, timeout: 1500ms, methods: [{name: m, mode: read}]}}\n"))
	if err != nil || c.Services[0].Exec.Timeout != 1500*time.Millisecond {
		t.Fatalf("timeout = %+v, %v", c.Services[0].Exec, err)
	}
}

func TestAppServiceBuild(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		s       ServiceConfig
		dataDir string
		want    []string // method names
		check   bool
		err     string
	}{
		{s: ServiceConfig{Name: "forum"}, dataDir: dir, want: []string{"AddMsg", "ViewHeaders", "ViewMsg", "Digest"}, check: true},
		{s: ServiceConfig{Name: "auction"}, want: []string{"AddItem", "BidItem", "ViewCategories", "ViewCategory", "ViewItem"}, check: true},
		{s: ServiceConfig{Name: "pcache", Storage: dir + "/pc"}, want: []string{"CacheUpdate", "CacheLookup"}, check: true},
		{s: ServiceConfig{Name: "pcache"}, err: "set storage"},
		{s: ServiceConfig{Name: "echo"}, want: []string{"echo", "chunks", "talk"}},
	} {
		svc, err := tc.s.service(tc.dataDir)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%s: err = %v, want %q", tc.s.Name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.s.Name, err)
		}
		var got []string
		for _, m := range svc.Methods {
			got = append(got, m.Name)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") || (svc.Check != nil) != tc.check {
			t.Fatalf("%s: methods %v check %v, want %v %v", tc.s.Name, got, svc.Check != nil, tc.want, tc.check)
		}
	}
}
