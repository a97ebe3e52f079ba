package depcheck

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/neptune-cluster/neptune"

// forbidden says why the product may not depend on pkg, or "" if it may.
func forbidden(pkg string) string {
	switch {
	case pkg == module+"/lab" || strings.HasPrefix(pkg, module+"/lab/"):
		return "lab code (benchmarks, simulators, workloads, demo, charts, CSV)"
	case strings.HasPrefix(pkg, "gonum.org/"):
		return "gonum (numerics and plotting)"
	case strings.HasPrefix(pkg, "codeberg.org/go-pdf/"), strings.HasPrefix(pkg, "github.com/go-pdf/"),
		strings.HasPrefix(pkg, "github.com/jung-kurt/gofpdf"):
		return "a PDF writer"
	case strings.HasPrefix(pkg, "codeberg.org/go-latex/"), strings.HasPrefix(pkg, "github.com/go-latex/"):
		return "a LaTeX renderer"
	case strings.HasPrefix(pkg, "codeberg.org/go-fonts/"), strings.HasPrefix(pkg, "github.com/go-fonts/"),
		strings.HasPrefix(pkg, "github.com/golang/freetype"), strings.HasPrefix(pkg, "golang.org/x/image/font"):
		return "fonts"
	case strings.HasPrefix(pkg, "git.sr.ht/~sbinet/gg"), strings.HasPrefix(pkg, "github.com/ajstarks/svgo"),
		strings.HasPrefix(pkg, "golang.org/x/image/vector"):
		return "a drawing library of the plotting stack"
	case strings.HasPrefix(pkg, "k8s.io/"), strings.HasPrefix(pkg, "sigs.k8s.io/"):
		return "the Kubernetes API types, for deploy/kubernetes's manifest test only"
	case pkg == "github.com/tidwall/wal" || strings.HasPrefix(pkg, "github.com/tidwall/wal/"):
		return "tidwall/wal, a contender of the lab's write-log benchmark only"
	}
	return ""
}

// product reports whether pkg (a package of this module) is product code:
// everything but the lab (lab/cmd/neptune, the build that links both
// wings, among it) and this check. cmd/neptune, the shipped binary, is
// product.
func product(pkg string) bool {
	rest, ok := strings.CutPrefix(pkg, module)
	if !ok || (rest != "" && rest[0] != '/') {
		return false
	}
	return !slices.ContainsFunc([]string{"/lab", "/internal/depcheck"}, func(p string) bool {
		return rest == p || strings.HasPrefix(rest, p+"/")
	})
}

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); runtime.GOROOT() != "" {
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	return "go"
}

// goList runs `go list` with args and returns its output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command(goTool(), append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// graph is the import graph of pkgs and their dependencies (tests left
// out, as in the binary a user builds).
func graph(t *testing.T, pkgs []string) map[string][]string {
	t.Helper()
	g := map[string][]string{}
	for _, l := range goList(t, append([]string{"-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, pkgs...)...) {
		f := strings.Fields(l)
		g[f[0]] = f[1:]
	}
	return g
}

// violation is a forbidden package reached from a root, and how.
type violation struct {
	root, why string
	chain     []string // root … forbidden package
}

// violations walks the graph breadth-first from root, so each chain it
// reports is a shortest one; it does not walk past a forbidden package.
func violations(g map[string][]string, root string) []violation {
	from := map[string]string{root: ""}
	queue := []string{root}
	var out []violation
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if why := forbidden(p); why != "" {
			chain := []string{p}
			for q := from[p]; q != ""; q = from[q] {
				chain = append(chain, q)
			}
			slices.Reverse(chain)
			out = append(out, violation{root: root, why: why, chain: chain})
			continue
		}
		for _, d := range g[p] {
			if _, seen := from[d]; !seen {
				from[d] = p
				queue = append(queue, d)
			}
		}
	}
	return out
}

func (v violation) String() string {
	short := make([]string, len(v.chain))
	for i, p := range v.chain {
		short[i] = strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if short[i] == "" {
			short[i] = "neptune (root)"
		}
	}
	return v.chain[len(v.chain)-1] + ": " + v.why + "\n\t\timported by " + strings.Join(short, " → ")
}

func productPackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	for _, p := range goList(t, module+"/...") {
		if product(p) {
			pkgs = append(pkgs, p)
		}
	}
	for _, want := range []string{module, module + "/adapter", module + "/internal/sched", module + "/internal/dac", module + "/internal/cli", module + "/cmd/neptune"} {
		if !slices.Contains(pkgs, want) {
			t.Fatalf("product packages %v lack %s: the listing is wrong", pkgs, want)
		}
	}
	return pkgs
}

// TestProductDoesNotDependOnTheLab is the rule of the two wings.
func TestProductDoesNotDependOnTheLab(t *testing.T) {
	pkgs := productPackages(t)
	g := graph(t, pkgs)
	bad := 0
	for _, p := range pkgs {
		for _, v := range violations(g, p) {
			bad++
			t.Errorf("product package %s depends on %s", p, v)
		}
	}
	if bad == 0 {
		t.Logf("%d product packages, none depends on the lab or its plotting, PDF or font stack", len(pkgs))
	}
}

// TestRootPackageLinksNoPlotting: a program that imports the library gets
// no plotting, PDF or font package.
func TestRootPackageLinksNoPlotting(t *testing.T) {
	deps := goList(t, "-deps", module)
	for _, d := range deps {
		if why := forbidden(d); why != "" {
			t.Errorf("go list -deps %s lists %s (%s)", module, d, why)
		}
	}
	t.Logf("go list -deps %s: %d packages", module, len(deps))
}

// TestCheckSeesTheLab makes sure the check is not vacuous: the lab's
// command tree does reach what the product may not.
func TestCheckSeesTheLab(t *testing.T) {
	for _, p := range []string{module + "/lab/labcmd", module + "/lab/cmd/neptune", module + "/internal/depcheck"} {
		if product(p) {
			t.Fatalf("%s counted as product", p)
		}
	}
	if !product(module + "/cmd/neptune") {
		t.Fatal("the shipped binary, cmd/neptune, is not checked as product")
	}
	g := graph(t, []string{module + "/lab/cmd/neptune"})
	vs := violations(g, module+"/lab/cmd/neptune")
	var whys []string
	for _, v := range vs {
		whys = append(whys, v.why)
	}
	if len(vs) == 0 || !slices.ContainsFunc(vs, func(v violation) bool { return strings.HasPrefix(v.why, "lab code") }) {
		t.Fatalf("lab/cmd/neptune, which links the lab, shows no violation: %v", whys)
	}
	// The lab's charts reach the plotting stack.
	plotting := 0
	for _, d := range goList(t, "-deps", module+"/lab/report") {
		if why := forbidden(d); why != "" && !strings.HasPrefix(why, "lab code") {
			plotting++
		}
	}
	if plotting == 0 {
		t.Fatal("lab/report shows no plotting, PDF or font dependency: the check would miss them")
	}
}
