package clustertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tourStep is what the test expects of the one tour line containing match.
type tourStep struct {
	match string
	// Foreground lines: exit 0, and stdout must be exactly stdout (spaces
	// around trimmed), contain every want and match wantRe. quitAfter:
	// once stdout shows it, type q (the line runs until then, as neptune
	// top does).
	stdout    *string
	want      []string
	wantRe    string
	quitAfter string
	// Background lines (ending in &): wait until these TCP addresses
	// accept and these URLs answer 200, as a reader waits for a started
	// process before the next line.
	ports []string
	urls  []string
	// primaries: wait until n1's dashboard shows every partition with a
	// primary (what status would show).
	primaries bool
}

var tourSteps = []tourStep{
	{match: "--id n1 ", ports: []string{"127.0.0.1:7946"}, urls: []string{"http://127.0.0.1:9100/livez"}},
	{match: "--id n2 ", ports: []string{"127.0.0.1:7947"}},
	{match: "--id n3 ", ports: []string{"127.0.0.1:7948"}, primaries: true},
	{match: "--method get --body k", stdout: ptr("v")},
	{match: "neptune status", want: []string{"3 nodes", "SERVICE  PARTITION  LEVEL"}, wantRe: `(?m)^kv\s+1\s+2 linearizable\s+n[123]\s+[1-9]`},
	{match: "neptune top", quitAfter: "PARTITIONS: 4", want: []string{"PARTITIONS: 4, 0 without primary"}},
	{match: "neptune gateway", ports: []string{"127.0.0.1:8080"}, urls: []string{"http://127.0.0.1:9101/readyz"}},
	{match: "curl -X PUT -H 'X-API-Key: example-partner-key' --data-binary k=w", stdout: ptr("")},
	{match: "curl -X GET --data-binary k", stdout: ptr("w")},
	{match: "curl -i -X PUT", want: []string{"HTTP/1.1 400 Bad Request", "put wants key=value"}},
	{match: "neptune partition move", want: []string{"n3"}},
	{match: "neptune version", want: []string{"neptune"}},
}

// tourPorts are the fixed ports the tour uses.
var tourPorts = []string{"127.0.0.1:7946", "127.0.0.1:7947", "127.0.0.1:7948", "127.0.0.1:9100", "127.0.0.1:9101", "127.0.0.1:8080"}

// goField is a Go field named where the command line should name a flag
// or a config key.
var goField = regexp.MustCompile(`\b(NodeConfig|ClientConfig|Security|Replication)\.[A-Z]`)

// TestREADMETour runs the README's shell tour line by line, as written,
// with the freshly built binary on PATH, in an empty directory holding a
// copy of examples/: the secured quick start, three nodes from
// examples/node.yaml, calls, status, top, the gateway from
// examples/gateway.yaml with its example key, an operator's move. Lines
// ending in & run in the background until the end. Each line must exit
// 0, and selected outputs are checked (tourSteps). The tour's ports are
// fixed, so a reader can copy it: the test skips when one is taken (and
// fails under CI).
func TestREADMETour(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("README tour cannot run: "+format, args...)
		}
		msg := fmt.Sprintf("SKIPPING the README tour: "+format, args...)
		fmt.Fprintln(os.Stderr, msg) // seen without -v too
		t.Skip(msg)
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable("%s is not installed", tool)
		}
	}
	for _, a := range tourPorts {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			unavailable("port %s is taken (%v); the tour's ports are fixed", a, err)
		}
		ln.Close()
	}
	lines := tourLines(t, filepath.Join(repoRoot, "README.md"))
	if len(lines) < 10 {
		t.Fatalf("found %d tour lines in README.md: the <!-- tour --> marked sh blocks are gone", len(lines))
	}
	steps := map[int]tourStep{}
	for _, s := range tourSteps {
		found := -1
		for i, l := range lines {
			if strings.Contains(l, s.match) {
				if found >= 0 {
					t.Fatalf("tour step %q matches lines %d and %d", s.match, found+1, i+1)
				}
				found = i
			}
		}
		if found < 0 {
			t.Fatalf("tour step %q matches no line of the README's tour: update tourSteps with the README", s.match)
		}
		steps[found] = s
	}

	bin := neptuneBinary(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"node.yaml", "gateway.yaml"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "examples", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "NEPTUNE_") && !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	env = append(env, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))

	type proc struct {
		cmd  *exec.Cmd
		done chan struct{} // closed once it exited
	}
	var bg []proc
	t.Cleanup(func() {
		for _, p := range bg {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		}
		for _, p := range bg {
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				<-p.done
			}
		}
	})
	background := regexp.MustCompile(`&\s*(#.*)?$`)
	for i, line := range lines {
		step := steps[i]
		if loc := background.FindStringIndex(line); loc != nil && !strings.HasSuffix(strings.TrimSpace(line[:loc[0]]), "&") {
			cmdline := line[:loc[0]]
			log := filepath.Join(dir, fmt.Sprintf("bg-%d.log", i+1))
			out, err := os.Create(log)
			if err != nil {
				t.Fatal(err)
			}
			c := exec.Command("bash", "-c", "exec "+cmdline)
			c.Dir, c.Env, c.Stdout, c.Stderr = dir, env, out, out
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := c.Start(); err != nil {
				t.Fatalf("line %d %q: %v", i+1, line, err)
			}
			out.Close()
			p := proc{c, make(chan struct{})}
			go func() { _ = c.Wait(); close(p.done) }()
			bg = append(bg, p)
			if len(step.ports)+len(step.urls) == 0 && !step.primaries {
				t.Fatalf("line %d %q runs in the background, and tourSteps says nothing to wait for", i+1, line)
			}
			if err := waitTour(p.done, step, filepath.Join(dir, "pki")); err != nil {
				b, _ := os.ReadFile(log)
				t.Fatalf("line %d %q: %v\n--- its output:\n%s", i+1, line, err, b)
			}
			t.Logf("line %d: started in the background: %s", i+1, cmdline)
			continue
		}
		out, errOut, err := runTourLine(dir, env, line, step.quitAfter)
		t.Logf("line %d: %s\n%s%s", i+1, line, out, errOut)
		if err != nil {
			t.Fatalf("line %d %q: %v\n%s%s%s", i+1, line, err, out, errOut, bgLogs(dir))
		}
		if step.stdout != nil && strings.TrimSpace(out) != *step.stdout {
			t.Errorf("line %d %q: stdout %q, want %q", i+1, line, out, *step.stdout)
		}
		for _, w := range step.want {
			if !strings.Contains(out, w) {
				t.Errorf("line %d %q: stdout lacks %q:\n%s", i+1, line, w, out)
			}
		}
		if step.wantRe != "" && !regexp.MustCompile(step.wantRe).MatchString(out) {
			t.Errorf("line %d %q: stdout does not match %s:\n%s", i+1, line, step.wantRe, out)
		}
		if m := goField.FindString(out + errOut); m != "" {
			t.Errorf("line %d %q: the output names a Go field (%s...), not a flag or key:\n%s%s", i+1, line, m, out, errOut)
		}
	}
	// The processes the tour started logged no error, and the gateway no
	// capacity warning (the estimator's own test covers the bogus one a
	// few calls used to cause).
	for _, bad := range []string{"level=ERROR", "reservations exceed"} {
		if strings.Contains(bgLogs(dir), bad) {
			t.Errorf("a background process logged %q:%s", bad, bgLogs(dir))
		}
	}
	if m := goField.FindString(bgLogs(dir)); m != "" {
		t.Errorf("a background process's log names a Go field (%s...):%s", m, bgLogs(dir))
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
