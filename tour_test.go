package neptune_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/pki"
)

// tourLines returns the lines of the README's shell blocks marked as the
// tour: a ```sh fence right after a line starting "<!-- tour", in order.
func tourLines(t *testing.T, readme string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	marked, in := false, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case in && strings.HasPrefix(l, "```"):
			in = false
		case in:
			if strings.TrimSpace(l) != "" {
				lines = append(lines, l)
			}
		case marked && l == "```sh":
			in, marked = true, false
		default:
			marked = strings.HasPrefix(l, "<!-- tour")
		}
	}
	return lines
}

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

func ptr(s string) *string { return &s }

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
	lines := tourLines(t, "README.md")
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
		b, err := os.ReadFile(filepath.Join("examples", f))
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

// runTourLine runs one foreground line in bash and returns its stdout and
// stderr; an error for a non-zero exit or after a minute. With quit, it
// types q once stdout shows quit.
func runTourLine(dir string, env []string, line, quit string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-c", line)
	c.Dir, c.Env = dir, env
	var mu sync.Mutex
	var out, errOut bytes.Buffer
	c.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	c.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return errOut.Write(p) })
	stdin, err := c.StdinPipe()
	if err != nil {
		return "", "", err
	}
	if err := c.Start(); err != nil {
		return "", "", err
	}
	if quit == "" {
		stdin.Close()
	} else {
		go func() {
			defer stdin.Close()
			for ctx.Err() == nil {
				mu.Lock()
				seen := strings.Contains(out.String(), quit)
				mu.Unlock()
				if seen {
					io.WriteString(stdin, "q")
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	err = c.Wait()
	mu.Lock()
	defer mu.Unlock()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after a minute")
	}
	return out.String(), errOut.String(), err
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitTour waits, for up to 30 s, until a background line's ports
// accept, its URLs answer 200 and, if asked, every partition on n1's
// dashboard has a primary; it fails at once if the process exits.
func waitTour(exited <-chan struct{}, s tourStep, pkiDir string) error {
	ready := func() error {
		for _, a := range s.ports {
			conn, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				return err
			}
			conn.Close()
		}
		hc := &http.Client{Timeout: time.Second}
		for _, u := range s.urls {
			resp, err := hc.Get(u)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", u, resp.Status)
			}
		}
		if s.primaries {
			// The dashboard is HTTPS on the tour's secured cluster and
			// admits operators: the tour's alice.
			alice := pki.Identity{Role: pki.RoleOperator, Name: "alice"}
			src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(pkiDir, alice), Expect: alice})
			if err != nil {
				return err
			}
			hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: src.HTTPSClientConfig()}}
			resp, err := hc.Get("https://127.0.0.1:9100/api/dashboard/partitions")
			if err != nil {
				return err
			}
			var v struct {
				Total     int `json:"total"`
				NoPrimary int `json:"no_primary"`
			}
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if v.Total == 0 || v.NoPrimary > 0 {
				return fmt.Errorf("partitions: %d, %d without a primary", v.Total, v.NoPrimary)
			}
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the process exited")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// bgLogs is the output of every background line so far, for a failure.
func bgLogs(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "bg-*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "\n--- %s:\n%s", filepath.Base(f), data)
	}
	return b.String()
}
