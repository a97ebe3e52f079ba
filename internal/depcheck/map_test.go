package depcheck

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The import map is the `deps` block of docs/ARCHITECTURE.md: for each
// package of the module, the module packages it may import, and on a
// second line those only its tests may. The build holds the map to the
// code both ways: an import the map does not allow fails, and so does an
// allowance no code uses (the map drifted). Names are paths in the module
// without "internal/"; "root" is the API package. A key ending in "/..."
// covers a folder's packages that have no line of their own, and "*"
// allows anything (the lab).

// shortName is how the map names a module package.
func shortName(pkg string) string {
	rest := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	if rest == "" {
		return "root"
	}
	return strings.TrimPrefix(rest, "internal/")
}

// depsMap is the parsed block: key (a name, or "name test") to its
// allowances.
type depsMap map[string][]string

func readMap(t *testing.T) depsMap {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n```deps\n")
	block, _, ok2 := strings.Cut("\n"+rest, "\n```")
	if !ok || !ok2 {
		t.Fatal("docs/ARCHITECTURE.md has no ```deps block")
	}
	m := depsMap{}
	for i, line := range strings.Split(block, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("ARCHITECTURE.md deps block, line %d: %q has no ':'", i+1, line)
		}
		suffix := ""
		if k, ok := strings.CutSuffix(strings.TrimSpace(key), " test"); ok {
			key, suffix = k, " test"
		}
		for _, name := range strings.Split(key, ",") {
			name = strings.TrimSpace(name) + suffix
			if _, dup := m[name]; dup {
				t.Fatalf("ARCHITECTURE.md deps block: %q twice", name)
			}
			m[name] = strings.Fields(val)
		}
	}
	return m
}

// lineFor is the key of pkg's line ("" if none): its own, else the
// longest folder key that covers it.
func (m depsMap) lineFor(name string) string {
	if _, ok := m[name]; ok {
		return name
	}
	best := ""
	for k := range m {
		if dir, ok := strings.CutSuffix(k, "/..."); ok && strings.HasPrefix(name, dir+"/") && len(k) > len(best) {
			best = k
		}
	}
	return best
}

// actualImports lists, for each module package, the module packages its
// code imports and those its tests add.
func actualImports(t *testing.T) (code, tests map[string][]string) {
	code, tests = map[string][]string{}, map[string][]string{}
	inModule := func(self string, ps string) []string {
		var out []string
		for _, p := range strings.Fields(ps) {
			if (p == module || strings.HasPrefix(p, module+"/")) && p != self {
				out = append(out, shortName(p))
			}
		}
		return out
	}
	for _, l := range goList(t, "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}} {{join .XTestImports \" \"}}", module+"/...") {
		f := strings.Split(l, "|")
		name := shortName(f[0])
		code[name] = inModule(f[0], f[1])
		for _, p := range inModule(f[0], f[2]) {
			if !slices.Contains(code[name], p) && !slices.Contains(tests[name], p) {
				tests[name] = append(tests[name], p)
			}
		}
	}
	return code, tests
}

// TestImportMapIsTrue holds docs/ARCHITECTURE.md's deps block to the code.
func TestImportMapIsTrue(t *testing.T) {
	m := readMap(t)
	code, tests := actualImports(t)
	if bad := check(m, code, tests); len(bad) > 0 {
		t.Errorf("docs/ARCHITECTURE.md's deps block and the code disagree:\n\t%s\n\nthe block that matches the code:\n%s",
			strings.Join(bad, "\n\t"), generated(code, tests))
	}
}

// check lists where the map and the imports disagree, both ways.
func check(m depsMap, code, tests map[string][]string) []string {
	used := map[string]map[string]bool{}
	mark := func(k, imp string) {
		if used[k] == nil {
			used[k] = map[string]bool{}
		}
		used[k][imp] = true
	}
	var bad []string
	for _, n := range slices.Sorted(maps.Keys(code)) {
		key := m.lineFor(n)
		if key == "" {
			bad = append(bad, fmt.Sprintf("%s has no line in the map", n))
			continue
		}
		for _, kind := range []struct {
			suffix  string
			imports []string
		}{{"", code[n]}, {" test", tests[n]}} {
			k := key + kind.suffix
			allowed := m[k]
			if slices.Contains(allowed, "*") {
				continue
			}
			for _, imp := range kind.imports {
				// A test may use what its code may.
				if kind.suffix != "" && slices.Contains(m[key], imp) {
					mark(key, imp)
					continue
				}
				if !slices.Contains(allowed, imp) {
					who := n
					if kind.suffix != "" {
						who += " (its tests)"
					}
					bad = append(bad, fmt.Sprintf("%s imports %s: not allowed by the map's %q line", who, imp, k))
				}
				mark(k, imp)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		for _, a := range m[k] {
			if a != "*" && !used[k][a] {
				bad = append(bad, fmt.Sprintf("the map's %q line allows %s, which nothing it covers imports (drift)", k, a))
			}
		}
	}
	return bad
}

// generated is the deps block the code implies, for a maintainer to
// review and paste: packages with the same allowances share a line (those
// that import nothing of the module first), the lab is folded into
// "lab/...: *".
func generated(code, tests map[string][]string) string {
	type allow struct{ code, tests string }
	groups := map[allow][]string{}
	for n := range code {
		if !strings.HasPrefix(n, "lab/") {
			a := allow{strings.Join(slices.Sorted(slices.Values(code[n])), " "), strings.Join(slices.Sorted(slices.Values(tests[n])), " ")}
			groups[a] = append(groups[a], n)
		}
	}
	keys := slices.SortedFunc(maps.Keys(groups), func(a, b allow) int {
		if (a.code == "") != (b.code == "") {
			if a.code == "" {
				return -1
			}
			return 1
		}
		return strings.Compare(slices.Min(groups[a]), slices.Min(groups[b]))
	})
	var b strings.Builder
	for _, a := range keys {
		names := strings.Join(slices.Sorted(slices.Values(groups[a])), ", ")
		fmt.Fprintf(&b, "%s: %s\n", names, a.code)
		if a.tests != "" {
			fmt.Fprintf(&b, "%s test: %s\n", names, a.tests)
		}
	}
	b.WriteString("lab/...: *\nlab/... test: *\n")
	return b.String()
}

// TestImportMapCatchesDrift: the check is not vacuous: an import the map
// does not allow, a package with no line and an unused allowance are each
// refused; a true map passes.
func TestImportMapCatchesDrift(t *testing.T) {
	code := map[string][]string{"node": {"client"}, "client": nil, "apps/kv": {"root"}, "root": {"node"}, "lab/x": {"node"}}
	tests := map[string][]string{"node": {"testfs"}}
	truth := depsMap{"node": {"client"}, "node test": {"testfs"}, "client": nil, "apps/...": {"root"}, "root": {"node"}, "lab/...": {"*"}}
	if bad := check(truth, code, tests); len(bad) > 0 {
		t.Fatalf("a true map refused: %v", bad)
	}
	for name, edit := range map[string]func(depsMap){
		"an import not allowed":     func(m depsMap) { m["node"] = nil },
		"a test import not allowed": func(m depsMap) { delete(m, "node test") },
		"a package with no line":    func(m depsMap) { delete(m, "client") },
		"an unused allowance":       func(m depsMap) { m["client"] = []string{"node"} },
	} {
		m := maps.Clone(truth)
		edit(m)
		if bad := check(m, code, tests); len(bad) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestOnlyTheClusterTestsReachTheLab: a product package's own tests
// import no lab package; the integration tests (clustertest), which run
// the lab's local clusters and workloads, are the one exception, so a
// product package's unit tests build without the lab.
func TestOnlyTheClusterTestsReachTheLab(t *testing.T) {
	code, tests := actualImports(t)
	for name, imps := range tests {
		if name == "clustertest" || name == "lab" || strings.HasPrefix(name, "lab/") || name == "depcheck" {
			continue
		}
		for _, p := range append(slices.Clone(code[name]), imps...) {
			if p == "lab" || strings.HasPrefix(p, "lab/") {
				t.Errorf("%s (with its tests) imports %s: move the test to clustertest", name, p)
			}
		}
	}
}
