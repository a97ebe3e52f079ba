// Package localcluster runs Neptune nodes as real processes on loopback, for
// the demo, the benchmarks and the integration tests: start, SIGKILL,
// SIGSTOP/SIGCONT and restart a node with the same identity and ports, and
// wait until the cluster is ready for a workload.
package localcluster

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
)

// Scratch returns this executable (which the demo and the benchmarks
// re-execute as nodes and helper processes) and a fresh temporary
// directory for their data and logs, with the function that removes it.
func Scratch(prefix string) (exe, dir string, cleanup func(), err error) {
	if exe, err = os.Executable(); err != nil {
		return "", "", nil, fmt.Errorf("find the neptune executable: %w", err)
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", nil, err
	}
	return exe, dir, func() { os.RemoveAll(dir) }, nil
}

// Spec describes one node process.
type Spec struct {
	ID string
	// Services are --service flag values, e.g. "kv:0-3".
	Services []string
	// Args are extra flags for `neptune node`, e.g. "--config", path.
	Args []string
	// SecurityArgs, if not nil, replace the cluster's security flags
	// (--insecure, or --tls-dir and --keyring): a test's outsider.
	SecurityArgs []string
	// CPU confines the process to this many cores (0.1 is a tenth of
	// one) with a cgroup quota (lab/cpuquota; root only); 0 leaves it
	// unconfined.
	CPU float64
	// MemoryMB, with CPU, also limits the process's group to this many
	// MiB of memory, the page cache it fills included; 0 leaves it
	// unlimited.
	MemoryMB int
}

// Node is a running (or stopped) node process.
type Node struct {
	Spec       Spec
	GossipPort int
	GossipAddr string
	LogPath    string

	mu    sync.Mutex
	cmd   *exec.Cmd
	group *cpuquota.Group // Spec.CPU's and MemoryMB's, kept across restarts
}

// Cluster owns node processes started from one neptune executable.
type Cluster struct {
	exe string
	dir string
	// pki is the directory of the cluster's throwaway CA, certificates and
	// keyring; "" runs the nodes with --insecure.
	pki string

	mu     sync.Mutex
	nodes  []*Node
	quotas *cpuquota.Root // opened by the first confined node
}

// New returns a cluster that starts nodes with the neptune binary exe and
// writes their logs under dir. Its nodes run with --insecure; NewSecure
// gives them certificates and a gossip key.
func New(exe, dir string) *Cluster { return &Cluster{exe: exe, dir: dir} }

// NewSecure returns a cluster whose nodes run secured with throwaway
// material in dir/pki (security.Scratch): a CA for cluster, a node
// certificate for each node as it is first started, a client certificate
// "client/client", an operator's "operator/operator" and a keyring file
// (KeyringFile) every node watches.
func NewSecure(exe, dir, cluster string) (*Cluster, error) {
	c := &Cluster{exe: exe, dir: dir, pki: filepath.Join(dir, "pki")}
	if err := security.Scratch(c.pki, cluster); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	return c, nil
}

// PKIDir is the directory of the cluster's CA, certificates and keyring,
// "" for an insecure cluster.
func (c *Cluster) PKIDir() string { return c.pki }

// KeyringFile is the gossip keyring every node watches, "" if insecure.
func (c *Cluster) KeyringFile() string {
	if c.pki == "" {
		return ""
	}
	return filepath.Join(c.pki, security.KeyringFileName)
}

// ClientSecurity is the Security of a client of this cluster presenting
// cert ("client/client" or "operator/operator"), or Insecure.
func (c *Cluster) ClientSecurity(cert string) neptune.Security {
	if c.pki == "" {
		return neptune.Security{Insecure: true}
	}
	return neptune.Security{Dir: c.pki, Cert: cert}
}

// SecurityArgs are the security flags of a neptune command joining this
// cluster; cert is its --cert ("" for a node).
func (c *Cluster) SecurityArgs(cert string) []string {
	if c.pki == "" {
		return []string{"--insecure"}
	}
	args := []string{"--tls-dir", c.pki, "--keyring", c.KeyringFile()}
	if cert != "" {
		args = append(args, "--cert", cert)
	}
	return args
}

// Conns are connections to the cluster's nodes for a lab tool that
// calls nodes directly, presenting cert when the cluster is secured.
func (c *Cluster) Conns(cert string) (*transport.Conns, error) {
	if c.pki == "" {
		return transport.NewConns(), nil
	}
	role, name, _ := strings.Cut(cert, "/")
	m, err := security.Load(security.Config{Dir: c.pki, Identity: pki.Identity{Role: pki.Role(role), Name: name}})
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	return m.Transport().NewConns()
}

// nodeCert issues node id's certificate on first use.
func (c *Cluster) nodeCert(id string) error {
	return c.Issue(pki.Identity{Role: pki.RoleNode, Name: id})
}

// Issue issues a certificate for nid in the cluster's PKI directory (a
// gateway's, say, presented with SecurityArgs("gateway/NAME")) unless it
// has one; nothing for an insecure cluster.
func (c *Cluster) Issue(nid pki.Identity) error {
	if c.pki == "" {
		return nil
	}
	if _, err := os.Stat(pki.FilesFor(c.pki, nid).Cert); err == nil {
		return nil
	}
	ca, err := pki.LoadCA(c.pki)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	if _, err := ca.IssueFiles(c.pki, nid, false, pki.IssueOptions{}); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	return nil
}

// HTTP returns a client for the members' HTTP listeners (dashboard,
// /metrics) and the URL scheme to use: on a secured cluster HTTPS
// presenting cert ("operator/operator", "scraper/prom"; issued if
// missing), as they admit only an identity; plain HTTP otherwise.
func (c *Cluster) HTTP(cert string) (*http.Client, string, error) {
	if c.pki == "" {
		return &http.Client{Timeout: 5 * time.Second}, "http", nil
	}
	role, name, _ := strings.Cut(cert, "/")
	id := pki.Identity{Role: pki.Role(role), Name: name}
	if err := c.Issue(id); err != nil {
		return nil, "", err
	}
	src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(c.pki, id), Expect: id})
	if err != nil {
		return nil, "", fmt.Errorf("localcluster: %w", err)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: src.HTTPSClientConfig()}}, "https", nil
}

// Seeds returns the gossip addresses of the first up to three nodes.
func (c *Cluster) Seeds() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.nodes {
		if len(out) == 3 {
			break
		}
		out = append(out, n.GossipAddr)
	}
	return out
}

// Start launches a node with a fresh gossip port, joining the existing
// nodes, and waits until it reports that it is up.
// A port found free can still be bound by another process before the
// node binds it, so a start that lost that race is tried again on another
// port.
func (c *Cluster) Start(ctx context.Context, spec Spec) (*Node, error) {
	var n *Node
	for attempt := 0; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		n = &Node{Spec: spec, GossipPort: port, GossipAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), LogPath: filepath.Join(c.dir, spec.ID+".log")}
		err = c.launch(ctx, n, c.Seeds())
		if err == nil {
			break
		}
		if attempt == 2 || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n, nil
}

// Restart starts a killed node again with the same id and gossip port,
// joining up to three of the other nodes, running ones first: the first
// nodes started may be the ones killed.
func (c *Cluster) Restart(ctx context.Context, n *Node) error {
	c.mu.Lock()
	others := slices.DeleteFunc(slices.Clone(c.nodes), func(o *Node) bool { return o == n })
	c.mu.Unlock()
	down := func(o *Node) int {
		if o.PID() != 0 {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(others, func(a, b *Node) int { return cmp.Compare(down(a), down(b)) })
	var seeds []string
	for _, o := range others[:min(3, len(others))] {
		seeds = append(seeds, o.GossipAddr)
	}
	return c.launch(ctx, n, seeds)
}

func (c *Cluster) launch(ctx context.Context, n *Node, seeds []string) error {
	// A bounded join: a test's node that cannot join fails, saying why.
	args := []string{"node", "--id", n.Spec.ID, "--gossip-port", strconv.Itoa(n.GossipPort), "--log-level", "info", "--join-timeout", "10s"}
	if n.Spec.SecurityArgs != nil {
		args = append(args, n.Spec.SecurityArgs...)
	} else {
		if err := c.nodeCert(n.Spec.ID); err != nil {
			return err
		}
		args = append(args, c.SecurityArgs("")...)
	}
	for _, s := range n.Spec.Services {
		args = append(args, "--service", s)
	}
	for _, s := range seeds {
		args = append(args, "--join", s)
	}
	args = append(args, n.Spec.Args...)
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	cmd := exec.Command(c.exe, args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return fmt.Errorf("localcluster: %w", err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("localcluster: start %s: %w", n.Spec.ID, err)
	}
	go func() { _ = cmd.Wait(); logf.Close() }()
	if err := c.confine(n, cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	up := make(chan error, 2)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), " up: ") {
				up <- nil
				break
			}
		}
		up <- errors.New("exited before it was up")
		for sc.Scan() {
		}
	}()
	select {
	case err = <-up:
	case <-time.After(15 * time.Second):
		err = errors.New("not up after 15s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = cmd.Process.Kill()
		tail, _ := os.ReadFile(n.LogPath)
		return fmt.Errorf("localcluster: node %s %w; log:\n%s", n.Spec.ID, err, lastLines(string(tail), 20))
	}
	n.mu.Lock()
	n.cmd = cmd
	n.mu.Unlock()
	return nil
}

// quotaRoots numbers the clusters' cgroup roots within this process.
var quotaRoots atomic.Int64

// confine puts a node with Spec.CPU into its cgroup (made at its first
// start, with Spec.MemoryMB's limit).
func (c *Cluster) confine(n *Node, pid int) error {
	if n.Spec.CPU <= 0 {
		if n.Spec.MemoryMB != 0 {
			return fmt.Errorf("localcluster: node %s: MemoryMB needs CPU > 0", n.Spec.ID)
		}
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quotas == nil {
		// Named per cluster, not per process: a bench makes many clusters
		// in turn, and a group whose last process had not quite left when
		// its cluster closed stays behind under the old name.
		r, err := cpuquota.Open(fmt.Sprintf("neptune-localcluster-%d-%d", os.Getpid(), quotaRoots.Add(1)))
		if err != nil {
			return fmt.Errorf("localcluster: node %s wants %.2f cores: %w", n.Spec.ID, n.Spec.CPU, err)
		}
		c.quotas = r
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.group == nil {
		g, err := c.quotas.Group(n.Spec.ID, n.Spec.CPU, int64(n.Spec.MemoryMB)<<20)
		if err != nil {
			return fmt.Errorf("localcluster: %w", err)
		}
		n.group = g
	}
	return n.group.Add(pid)
}

// Kill sends SIGKILL: the node dies without leaving the cluster.
func (n *Node) Kill() error { return n.signal(syscall.SIGKILL) }

// Pause sends SIGSTOP: the node stops answering but keeps its sockets.
func (n *Node) Pause() error { return n.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT after Pause.
func (n *Node) Resume() error { return n.signal(syscall.SIGCONT) }

// PID is the process id, or 0 if not running.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

func (n *Node) signal(s syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("localcluster: node %s is not running", n.Spec.ID)
	}
	if err := n.cmd.Process.Signal(s); err != nil {
		return fmt.Errorf("localcluster: signal %s: %w", n.Spec.ID, err)
	}
	if s == syscall.SIGKILL {
		_, _ = n.cmd.Process.Wait()
		n.cmd = nil
	}
	return nil
}

// Stop sends SIGTERM, which drains the node (its primaries handed over,
// its calls in flight finished), and waits up to limit for the process to
// exit; it returns how long that took (SIGKILL after limit, with an
// error).
func (n *Node) Stop(limit time.Duration) (time.Duration, error) {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		return 0, fmt.Errorf("localcluster: node %s is not running", n.Spec.ID)
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("localcluster: SIGTERM %s: %w", n.Spec.ID, err)
	}
	if !gone(cmd.Process.Pid, limit) {
		_ = cmd.Process.Kill()
		return time.Since(start), fmt.Errorf("localcluster: node %s still running %v after SIGTERM; killed", n.Spec.ID, limit)
	}
	n.mu.Lock()
	n.cmd = nil
	n.mu.Unlock()
	return time.Since(start), nil
}

// gone waits up to limit for process pid to be gone: signal 0 fails once
// launch's goroutine has reaped it.
func gone(pid int, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); ; time.Sleep(10 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Close stops every node: SIGCONT (in case it was paused), SIGTERM, and
// SIGKILL after a grace period.
func (c *Cluster) Close() {
	c.mu.Lock()
	nodes := c.nodes
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		n.mu.Lock()
		cmd := n.cmd
		n.cmd = nil
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			// A node still draining after 3 s is killed, and Close
			// returns only once it is gone, so its data directory is free
			// (pebble's lock) for whoever reads it next.
			if !gone(cmd.Process.Pid, 3*time.Second) {
				_ = cmd.Process.Kill()
				gone(cmd.Process.Pid, 10*time.Second)
			}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quotas != nil {
		_ = c.quotas.Close()
		c.quotas = nil
	}
}

// RSS returns the resident set size of pid in bytes, from /proc.
func RSS(pid int) (int64, error) { return procStatus(pid, "VmRSS:") }

// PeakRSS returns the peak resident set size of pid in bytes (VmHWM, the
// high-water mark the kernel keeps since the process started).
func PeakRSS(pid int) (int64, error) { return procStatus(pid, "VmHWM:") }

// procStatus reads one kB field of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("localcluster: no %s in /proc/%d/status", field, pid)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
