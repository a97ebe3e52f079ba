package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Every node listens on these ports at its own address.
const (
	gossipPort = "7946"
	rpcPort    = "7947"
	pollPort   = "7948"
)

// Services are the replicated services every schedule runs: the
// list-append service and kv (the register).
var Services = []string{listappend.Name, "kv"}

// Cluster is three node processes, one per namespace, and the observer's
// direct lines to them from the root namespace (polls and calls that no
// cut touches).
type Cluster struct {
	Net   *Net
	Nodes []*Node
	// Linearizable is true when the binary accepted the kv service's
	// `replication.linearizable: true`; LeaseSet when it accepted
	// `replication.lease` (else the nodes run without leases or with
	// their default).
	Linearizable, LeaseSet bool
	// Level is the list-append service's level; kv runs at level 3.
	// Unreplicated: one node hosting both services without replication
	// (the baseline of the lossy-link benchmark).
	Level, Parts int
	Unreplicated bool
	Staleness    time.Duration

	exe, dir, config string
	// labExe is the binary with the lab's hidden verbs (the delayer).
	labExe string
	poller *transport.Poller
	conns  *transport.Conns
}

// Node is one node process.
type Node struct {
	ID      string
	Host    *Host
	DataDir string
	LogPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// clusterYAML is the shared config; lease > 0 sets both services' lease,
// linearizable adds the option to kv; level 0 is both services without
// replication.
func clusterYAML(parts, level int, staleness, lease time.Duration, linearizable bool) string {
	if level == 0 {
		return fmt.Sprintf("services:\n  - name: %s\n    partitions: 0-%d\n  - name: kv\n    partitions: 0-%d\n", listappend.Name, parts-1, parts-1)
	}
	lin, ls := "", ""
	if linearizable {
		lin = ", linearizable: true"
	}
	if lease > 0 {
		ls = fmt.Sprintf(", lease: %s", lease)
	}
	return fmt.Sprintf(`services:
  - name: %s
    partitions: 0-%d
    replication: {level: %d, nodes: [n1, n2, n3], degree: 3, staleness: %s%s}
  - name: kv
    partitions: 0-%d
    replication: {level: 3, nodes: [n1, n2, n3], degree: 3, staleness: %s%s%s}
`, listappend.Name, parts-1, level, staleness, ls, parts-1, staleness, ls, lin)
}

// StartCluster makes namespaces n1..n3 on net and starts a node in each
// (level 0: one node, n1, with both services unreplicated).
// It first tries kv with `linearizable: true` (if linearizable) and both services with
// `lease: <lease>`; a key the binary refuses is dropped (kv then runs at
// plain level 3), and said so in Linearizable and LeaseSet.
func StartCluster(ctx context.Context, net *Net, exe, dir string, level, parts int, staleness, lease time.Duration, linearizable bool, log io.Writer) (*Cluster, error) {
	poller, err := transport.NewPoller(slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	c := &Cluster{Net: net, Level: level, Parts: parts, Staleness: staleness, exe: exe, dir: dir, config: filepath.Join(dir, "cluster.yaml"),
		poller: poller, conns: transport.NewConns(), Linearizable: linearizable && level > 0, LeaseSet: lease > 0 && level > 0, Unreplicated: level == 0}
	nodes := 3
	if c.Unreplicated {
		nodes = 1
	}
	for i := range nodes {
		id := fmt.Sprintf("n%d", i+1)
		h, err := net.AddHost(id)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, &Node{ID: id, Host: h, DataDir: filepath.Join(dir, id), LogPath: filepath.Join(dir, id+".log")})
	}
	for i, n := range c.Nodes {
		for attempt := 0; ; attempt++ {
			var l time.Duration
			if c.LeaseSet {
				l = lease
			}
			if err := os.WriteFile(c.config, []byte(clusterYAML(parts, level, staleness, l, c.Linearizable)), 0o644); err != nil {
				c.Close()
				return nil, err
			}
			err := c.start(ctx, n)
			if err != nil && i == 0 && attempt < 2 {
				why := refusal(err, "linearizable")
				if c.Linearizable && why != "" {
					fmt.Fprintf(log, "linearizable level not available in this binary (%s): kv runs at level 3\n", why)
					c.Linearizable = false
					continue
				}
				if why = refusal(err, "field lease"); c.LeaseSet && why != "" {
					fmt.Fprintf(log, "replication.lease not available in this binary (%s): nodes run without it\n", why)
					c.LeaseSet = false
					continue
				}
			}
			if err != nil {
				c.Close()
				return nil, err
			}
			break
		}
	}
	if err := c.WaitConverged(ctx, 30*time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// refusal is the line of a failed start's error that mentions key, or "".
func refusal(err error, key string) string {
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.Contains(l, key) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// start launches n, joining the other nodes, and waits for its "up" line.
func (c *Cluster) start(ctx context.Context, n *Node) error {
	args := []string{"node", "--id", n.ID, "--host", n.Host.IP, "--gossip-port", gossipPort, "--rpc-port", rpcPort, "--poll-port", pollPort,
		"--insecure", "--config", c.config, "--data-dir", n.DataDir, "--announce-interval", "200ms", "--announce-ttl", "1s", "--log-level", "info"}
	for _, o := range c.Nodes {
		if o != n && o.Running() {
			args = append(args, "--join", o.Host.IP+":"+gossipPort)
		}
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := n.Host.Command(c.exe, args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("faults: start %s: %w", n.ID, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	up := watchReady(out, func(line string) bool { return strings.Contains(line, " up: ") })
	select {
	case ok := <-up:
		if !ok {
			<-exited
			tail, _ := os.ReadFile(n.LogPath)
			return fmt.Errorf("faults: node %s exited before it was up; log:\n%s", n.ID, lastLines(string(tail), 15))
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("faults: node %s not up after 20s", n.ID)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return ctx.Err()
	}
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	return nil
}

// Restart starts a killed node again with its data directory.
func (c *Cluster) Restart(ctx context.Context, n *Node) error { return c.start(ctx, n) }

// Signal sends s to n's process; SIGKILL also waits for it to be gone.
func (n *Node) Signal(s syscall.Signal) error {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	if s == syscall.SIGKILL {
		n.cmd = nil
	}
	n.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("faults: node %s is not running", n.ID)
	}
	if err := cmd.Process.Signal(s); err != nil {
		return fmt.Errorf("faults: signal %s: %w", n.ID, err)
	}
	if s == syscall.SIGKILL {
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("faults: %s did not die", n.ID)
		}
	}
	return nil
}

// Running reports whether n has a live process.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Close stops the nodes (SIGCONT, SIGTERM, SIGKILL after 3 s).
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		n.mu.Lock()
		cmd, exited := n.cmd, n.exited
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
			select {
			case <-exited:
			case <-time.After(3 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}()
	}
	wg.Wait()
	c.poller.Close()
	c.conns.Close()
}

// Answer is one node's poll answer for a partition.
type Answer struct {
	Node                 string
	OK, Serving, Primary bool
	Version              uint64
	// Lease is what the primary had left of its majority lease.
	Lease time.Duration
}

// Poll asks every node directly about svc's partition p (300 ms).
func (c *Cluster) Poll(ctx context.Context, svc string, p int) []Answer {
	targets := make([]transport.PollTarget, len(c.Nodes))
	for i, n := range c.Nodes {
		targets[i] = transport.PollTarget{Replica: n.ID, Addr: n.Host.IP + ":" + pollPort}
	}
	got := c.poller.Poll(ctx, targets, svc, int32(p), "", 300*time.Millisecond)
	out := make([]Answer, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i].Node = n.ID
		for _, a := range got {
			if a.Replica == n.ID {
				out[i] = Answer{Node: n.ID, OK: true, Serving: a.Version.Serving, Primary: a.Version.Primary, Version: a.Version.Version}
				out[i].Lease = a.Version.Lease
			}
		}
	}
	return out
}

// Primary is the node that answers as svc partition p's primary (of
// several, one holding a lease where polls carry leases, then the one with
// the highest version), or "".
func (c *Cluster) Primary(ctx context.Context, svc string, p int) string {
	best, v, leased := "", uint64(0), false
	for _, a := range c.Poll(ctx, svc, p) {
		if !a.Primary {
			continue
		}
		l := a.Lease > 0
		if best == "" || (l && !leased) || (l == leased && a.Version > v) {
			best, v, leased = a.Node, a.Version, l
		}
	}
	return best
}

// Node returns the node with id.
func (c *Cluster) Node(id string) *Node {
	i := slices.IndexFunc(c.Nodes, func(n *Node) bool { return n.ID == id })
	if i < 0 {
		return nil
	}
	return c.Nodes[i]
}

// WaitConverged waits until, for every partition of every service, every
// node answers serving at one version with exactly one primary (a few
// polls in a row).
func (c *Cluster) WaitConverged(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	streak := 0
	var last string
	for streak < 3 {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("faults: replicas did not converge in %v: %s", limit, last)
		}
		ok := true
		for _, svc := range Services {
			for p := range c.Parts {
				as := c.Poll(ctx, svc, p)
				primaries := 0
				for _, a := range as {
					if a.Primary {
						primaries++
					}
					if !a.OK || (!c.Unreplicated && (!a.Serving || a.Version != as[0].Version)) {
						ok = false
					}
				}
				if primaries != 1 && !c.Unreplicated {
					ok = false
				}
				if !ok {
					last = fmt.Sprintf("%s/%d: %+v", svc, p, as)
					break
				}
			}
			if !ok {
				break
			}
		}
		if ok {
			streak++
		} else {
			streak = 0
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// Read calls a read method on node n directly (no routing: the replica
// answers from its own state).
func (c *Cluster) Read(ctx context.Context, n *Node, svc string, p int, method string, body []byte) ([]byte, error) {
	rpc, err := c.conns.Client(n.Host.IP + ":" + rpcPort)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := rpc.Call(cctx, &pb.CallRequest{Service: svc, Partition: int32(p), Method: method, Mode: pb.Mode_MODE_READ, Body: body})
	if err != nil {
		return nil, fmt.Errorf("faults: %s %s/%d at %s: %w", method, svc, p, n.ID, err)
	}
	return resp.Body, nil
}

// TearWAL damages the tail of the newest write-log file (pebble's *.log)
// under n's data directory: it truncates the last cut bytes, or, if
// garble, overwrites them with garbage. n must be stopped.
func TearWAL(n *Node, cut int64, garble bool) (string, error) {
	var newest string
	var when time.Time
	_ = filepath.WalkDir(n.DataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") || strings.Contains(path, "service-") {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Size() > 0 && fi.ModTime().After(when) {
			newest, when = path, fi.ModTime()
		}
		return nil
	})
	if newest == "" {
		return "", errors.New("faults: no write-log file found")
	}
	fi, err := os.Stat(newest)
	if err != nil {
		return "", err
	}
	cut = min(cut, fi.Size())
	rel, _ := filepath.Rel(n.DataDir, newest)
	if !garble {
		return fmt.Sprintf("%s: truncated %d of %d bytes", rel, cut, fi.Size()), os.Truncate(newest, fi.Size()-cut)
	}
	f, err := os.OpenFile(newest, os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	junk := make([]byte, cut)
	for i := range junk {
		junk[i] = byte(0xA5 ^ i)
	}
	_, err = f.WriteAt(junk, fi.Size()-cut)
	return fmt.Sprintf("%s: garbled the last %d of %d bytes", rel, cut, fi.Size()), err
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// watchReady reads a process's output: true on the first line ready
// accepts, false if the output ends without one. It reads on to the end,
// so the process never blocks on a full pipe.
func watchReady(out io.Reader, ready func(line string) bool) <-chan bool {
	ch := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && ready(sc.Text()) {
				ok = true
				ch <- true
			}
		}
		if !ok {
			ch <- false
		}
	}()
	return ch
}

// isReady is the line a client process or a delayer prints once it runs.
func isReady(line string) bool { return line == "ready" }
